"""Seed 003 §V-B 1-b: give a trace's recurrence groups the paper's Table I job types.

The paper assigns each group of recurring jobs one of the nine profiled models of its
Table I (with one of that model's pipeline configurations), so every job of a group is
the same model-parallel training job.  :func:`assign_table1` does that, seeded:

* a group whose jobs ask for one GPU gets a model that runs in one stage (its
  ``min_stages`` is 1), drawn uniformly;
* a group of ``g`` GPUs gets a model that has a configuration of ``g`` GPUs
  (:func:`policies.pipeline.configurations`), then one of its configurations, both drawn
  uniformly.

Groups are visited in sorted key order, so the draw is fixed by the seed and the set of
(group, GPUs) pairs alone (what the paper leaves open: the distribution over models and
configurations; uniform is our choice).

:func:`table1_jobs` rewrites loaded trace jobs accordingly: ``app`` is the model,
``global_batch`` its Table I batch, ``stages`` the configuration, and ``total_iters`` the
trace duration divided by the model's minimum per-iteration time ``α̃^min`` (eq. 7 on
Heavy-Edge's placement on ⌈g / GPUs per node⌉ servers, §IV-B), so the job's predicted
exclusive duration ``ñ · α̃^min`` is its trace duration.  The trace duration is read
back from the loaded job (its iterations times the exclusive iteration time the loader
used, :func:`gimbalctl.traces.exclusive_iter_time`).

Used by ``gimbalctl simulate --job-types table1`` and ``bench/repro_asrpt.py``.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from policies.asrpt_core import _pipeline_bounds
from policies.model import Job
from policies.pipeline import MODELS, Network, configurations, pipeline_spec

from .predictor import group_key


def assign_table1(groups: Mapping, seed: int) -> dict:
    """``{group: GPUs}`` -> ``{group: (model, stages)}`` (module doc); group keys of one
    sortable kind."""
    rng = np.random.default_rng(seed)
    single = sorted(m for m in MODELS if MODELS[m].min_stages == 1)
    out: dict[str, tuple[str, int]] = {}
    for grp in sorted(groups):
        gpus = int(groups[grp])
        if gpus == 1:
            out[grp] = (single[int(rng.integers(len(single)))], 1)
            continue
        fit = sorted(m for m in MODELS if configurations(m, gpus))
        if not fit:
            raise ValueError(f"group {grp!r}: no Table I model has a configuration of {gpus} GPUs")
        m = fit[int(rng.integers(len(fit)))]
        cfg = configurations(m, gpus)
        out[grp] = (m, int(cfg[int(rng.integers(len(cfg)))]))
    return out


def alpha_min(model: str, stages: int, gpus: int, gpus_per_node: int,
              net: Network = Network()) -> float:
    """``α̃^min`` of a Table I job (§IV-B): eq. 7 on Heavy-Edge's placement."""
    return _pipeline_bounds(pipeline_spec(model, stages, gpus), gpus_per_node, net)[0]


def job_group(job: Job) -> str:
    """The job's recurrence key; a job without one is grouped by user and GPUs."""
    return job.group_id or group_key(job.user, "", job.num_gpus, None)


def trace_durations(jobs: Sequence[Job], models, nodes) -> list[float]:
    """Each loaded job's exclusive duration on ``nodes`` (its trace duration, up to the
    loader's one-iteration floor)."""
    from .traces import _shape, exclusive_iter_time

    shape = _shape(nodes)
    return [j.total_iters * exclusive_iter_time(j.app, j.num_gpus, j.global_batch, models, shape)
            for j in jobs]


def table1_jobs(jobs: Sequence[Job], durations: Sequence[float], gpus_per_node: int,
                seed: int, net: Network = Network()) -> list[Job]:
    """``jobs`` as Table I jobs (module doc); ``durations[i]`` is job i's trace duration.
    Types are drawn per (group, GPUs): jobs of one recurrence group that ask different GPU
    counts are different jobs (our choice; a Philly group key already holds the count)."""
    if len(durations) != len(jobs):
        raise ValueError("one duration per job")
    types = assign_table1({(job_group(j), j.num_gpus): j.num_gpus for j in jobs}, seed)
    out = []
    for j, dur in zip(jobs, durations):
        model, st = types[(job_group(j), j.num_gpus)]
        iters = max(float(dur) / alpha_min(model, st, j.num_gpus, gpus_per_node, net), 1.0)
        out.append(dataclasses.replace(j, app=model, global_batch=MODELS[model].batch,
                                       stages=st, total_iters=iters))
    return out
