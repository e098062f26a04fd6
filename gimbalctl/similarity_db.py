"""The reference database of the model-similarity policy (seed 002 §4.1), from the shipped
model characteristics (``data/model_features.csv``, made by :mod:`gimbalctl.zoo.features`).

Jobs name their model by application (``Job.app``).  The bundled applications are
Pollux's; each is the model below (the architecture its Pollux job trains), so its
characteristics are that model's.  A zoo model's own name is accepted as an application
too.  References — models with recorded performance — are the applications that have a
throughput profile in the models the snapshot carries (what profiling a job on the
cluster records); the others (VGG, DenseNet, ...) have characteristics only.
"""
from __future__ import annotations

import csv
import io
from importlib import resources
from typing import Iterable, Mapping, Optional

from policies.similarity import SimilarityDB

# Pollux application -> the model its job trains (gimbalctl/zoo/nets.py)
APP_MODEL = {"cifar10": "resnet18", "imagenet": "resnet50", "bert": "bert",
             "deepspeech2": "deepspeech2", "ncf": "recommendation", "yolov3": "yolov3"}


class FeatureTableError(ValueError):
    pass


def load_features(text: Optional[str] = None, source: str = "data/model_features.csv"
                  ) -> dict[str, tuple[float, ...]]:
    """Model -> characteristics vector (columns as ``policies.similarity.FEATURES``)."""
    from policies.similarity import FEATURES

    if text is None:
        text = resources.files("gimbalctl").joinpath("data/model_features.csv").read_text()
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None or tuple(header[1:1 + len(FEATURES)]) != FEATURES or header[0] != "model":
        raise FeatureTableError(f"{source}: header must be model,{','.join(FEATURES)},...; got {header}")
    out: dict[str, tuple[float, ...]] = {}
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        try:
            vec = tuple(float(x) for x in row[1:1 + len(FEATURES)])
        except ValueError as e:
            raise FeatureTableError(f"{source}:{line}: {e}") from None
        if len(vec) != len(FEATURES) or any(v < 0 or v != v for v in vec):
            raise FeatureTableError(f"{source}:{line}: need {len(FEATURES)} non-negative numbers")
        if row[0] in out:
            raise FeatureTableError(f"{source}:{line}: model {row[0]!r} listed twice")
        out[row[0]] = vec
    return out


def build_db(references: Iterable[str], features: Optional[Mapping[str, tuple]] = None,
             app_model: Mapping[str, str] = APP_MODEL, exclude_self: bool = False) -> SimilarityDB:
    """A :class:`SimilarityDB` whose references are ``references`` (applications with a
    throughput profile)."""
    feats = dict(load_features() if features is None else features)
    for app, model in app_model.items():
        if model in feats:
            feats.setdefault(app, feats[model])
    refs = tuple(sorted(r for r in references if r in feats))
    return SimilarityDB(feats, refs, exclude_self)
