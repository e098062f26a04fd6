"""Jobs with mixed parallelism (seed 003 §III): Table I job types, the per-iteration time
model eq. 4–7 and the graph of stage replicas.

A job of a Table I model (``Job.app`` one of :data:`MODELS`) runs ``Job.stages`` pipeline
stages over its ``Job.num_gpus`` GPUs; stage ``s`` has ``k_s`` data-parallel replicas, the
GPUs split as evenly as possible (the first ``num_gpus % stages`` stages one more).  The
per-replica quantities of §III-A follow from the model row (our estimates, documented in
:class:`ModelRow`): forward time ``p^f``, backward ``p^b``, activations in/out ``d^in``,
``d^out`` and parameters ``h`` (bytes).

Units: seconds, bytes, bytes per second.  The network defaults are §V-B's: NVLink
``B_intra = 300 GB/s`` and ``B_inter = 10 Gbps`` NICs (:class:`Network`).

Eq. 5 and eq. 6 are typeset ambiguously in the paper's text; our reading (documented):

* eq. 5: ``comm^m_s = I·x/((x/g)·B_inter) + L/B_intra`` where ``I`` is a replica's data to or
  from replicas of stages ``s±1`` on *other* servers (``2d^in(k_{s-1}-x^m_{s-1})/k_{s-1} +
  2d^out(k_{s+1}-x^m_{s+1})/k_{s+1}``), ``L`` the same on server ``m`` (fractions
  ``x^m_{s±1}/k_{s±1}``); the ``x`` replicas of stage ``s`` on ``m`` share the NIC
  bandwidth reserved for them, ``(x/g)·B_inter``.  First/last stage: the missing neighbour
  term is 0.
* eq. 6: ``2(k-1)h/(k·(x/g)·B_inter)`` if the replicas of stage ``s`` span servers
  (``x^m_s < k_s``), ``2(k-1)h/(k·B_intra)`` if all are on server ``m``; 0 for ``k = 1``.
* eq. 4: ``comp = p^f + p^b`` on every server hosting the stage; eq. 7 takes the max of
  ``comp + comm + AllReduce`` over servers and stages (asynchronous pipeline).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Network:
    """Bandwidths of §III (bytes/s): ``b_intra`` between GPUs of one server, ``b_inter``
    the server's NIC.  Defaults: §V-B (NVLink 300 GB/s, 10 Gbps NICs)."""

    b_intra: float = 300e9
    b_inter: float = 10e9 / 8

    @classmethod
    def from_units(cls, intra_gbytes: float = 300.0, inter_gbits: float = 10.0) -> "Network":
        return cls(intra_gbytes * 1e9, inter_gbits * 1e9 / 8)


@dataclass(frozen=True)
class ModelRow:
    """One row of Table I plus our estimates (the paper profiled on a V100 and does not
    publish the numbers): ``fwd_gflop`` forward GFLOP per sample, ``act_bytes`` activation
    bytes per sample at a stage boundary, ``min_stages`` the fewest stages whose parameters
    and Adam state (16 bytes per parameter) fit 80 % of a 32 GB V100.  ``last_param_frac``:
    share of the parameters in the last stage when split (VGG19's three FC layers hold
    ~86 % of its weights; the others split evenly)."""

    name: str
    params: float
    batch: int
    fwd_gflop: float
    act_bytes: float
    last_param_frac: float = 0.0

    @property
    def min_stages(self) -> int:
        return max(1, math.ceil(self.params * 16 / (0.8 * 32e9)))


# Table I (parameter count, mini-batch) + estimated FLOP and boundary activations
# (sequence 512 for the language models as §V-A 1-b profiles; BERT on SQuAD at 384).
MODELS: Mapping[str, ModelRow] = {r.name: r for r in (
    ModelRow("vgg19", 144e6, 32, 19.6, 512 * 14 * 14 * 4, last_param_frac=0.86),
    ModelRow("resnet152", 60e6, 4, 11.5, 1024 * 14 * 14 * 4),
    ModelRow("inception_v3", 24e6, 32, 5.7, 768 * 17 * 17 * 4),
    ModelRow("bert_large", 340e6, 4, 2 * 340e6 * 384 / 1e9, 384 * 1024 * 4),
    ModelRow("xlnet_large", 550e6, 4, 2 * 550e6 * 512 / 1e9, 512 * 1024 * 4),
    ModelRow("t5", 11e9, 8, 2 * 11e9 * 512 / 1e9, 512 * 1024 * 4),
    ModelRow("gpt_6.7b", 6.7e9, 32, 2 * 6.7e9 * 512 / 1e9, 512 * 4096 * 2),
    ModelRow("gpt_13b", 13e9, 32, 2 * 13e9 * 512 / 1e9, 512 * 5120 * 2),
    ModelRow("gpt_175b", 175e9, 16, 2 * 175e9 * 512 / 1e9, 512 * 12288 * 2),
)}
V100_FLOPS = 25e12  # effective training FLOP/s of one V100 (our estimate, ~20 % of fp16 peak)


@dataclass(frozen=True)
class StageSpec:
    """Per-replica quantities of one stage (§III-A)."""

    replicas: int  # k_s
    p_f: float
    p_b: float
    d_in: float
    d_out: float
    h: float


@dataclass(frozen=True)
class PipelineSpec:
    model: str
    stages: tuple[StageSpec, ...]

    @property
    def num_gpus(self) -> int:
        return sum(s.replicas for s in self.stages)


def configurations(model: str, num_gpus: int) -> tuple[int, ...]:
    """Stage counts offered for ``model`` on ``num_gpus`` GPUs (the planner of [20] is not
    available; our stand-in): the fewest stages that fit memory and twice that, each at most
    ``num_gpus``.  Empty when the model does not fit."""
    row = MODELS[model]
    s0 = row.min_stages
    return tuple(s for s in dict.fromkeys((s0, 2 * s0)) if s <= num_gpus)


def replicas(num_gpus: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(num_gpus, stages)
    return tuple(base + (1 if s < extra else 0) for s in range(stages))


@lru_cache(maxsize=4096)
def pipeline_spec(model: str, stages: int, num_gpus: int) -> PipelineSpec:
    """The job type ``model`` split into ``stages`` stages over ``num_gpus`` GPUs."""
    row = MODELS[model]
    if not 1 <= stages <= num_gpus:
        raise ValueError(f"{model}: {stages} stages do not fit {num_gpus} GPUs")
    ks = replicas(num_gpus, stages)
    fwd_stage = row.fwd_gflop * 1e9 * row.batch / stages / V100_FLOPS
    if stages == 1:
        fracs = [1.0]
    elif row.last_param_frac:
        fracs = [(1 - row.last_param_frac) / (stages - 1)] * (stages - 1) + [row.last_param_frac]
    else:
        fracs = [1.0 / stages] * stages
    out = []
    for s, k in enumerate(ks):
        act = row.act_bytes * row.batch / k
        out.append(StageSpec(k, fwd_stage / k, 2 * fwd_stage / k, act if s > 0 else 0.0,
                             act if s < stages - 1 else 0.0, 4.0 * row.params * fracs[s]))
    return PipelineSpec(model, tuple(out))


# ------------------------------------------------------------------ eq. 4-7
def iter_time(spec: PipelineSpec, counts: Sequence[Mapping[str, int]], gpus_per_server:
              Mapping[str, int], net: Network = Network()) -> float:
    """Eq. 7: ``α = max_{m,s} β^m_s`` for the placement ``counts[s][m] = x^m_s``."""
    alpha = 0.0
    st = spec.stages
    for s, sp in enumerate(st):
        for m, x in counts[s].items():
            if x <= 0:
                continue
            g = gpus_per_server[m]
            inter = intra = 0.0
            if s > 0:
                k0, x0 = st[s - 1].replicas, counts[s - 1].get(m, 0)
                inter += 2 * sp.d_in * (k0 - x0) / k0
                intra += 2 * sp.d_in * x0 / k0
            if s < len(st) - 1:
                k1, x1 = st[s + 1].replicas, counts[s + 1].get(m, 0)
                inter += 2 * sp.d_out * (k1 - x1) / k1
                intra += 2 * sp.d_out * x1 / k1
            comm = inter * x / ((x / g) * net.b_inter) + intra / net.b_intra  # eq. 5
            k = sp.replicas
            if k <= 1:
                ar = 0.0
            elif x < k:  # eq. 6, replicas span servers: the NIC share is the bottleneck
                ar = 2 * (k - 1) * sp.h / (k * (x / g) * net.b_inter)
            else:
                ar = 2 * (k - 1) * sp.h / (k * net.b_intra)
            alpha = max(alpha, sp.p_f + sp.p_b + comm + ar)  # eq. 4 + 7
    return alpha


def counts_of(stage_nodes: Sequence[Sequence[str]]) -> list[dict[str, int]]:
    """``x^m_s`` from each stage's list of server names (one per replica)."""
    out = []
    for nodes in stage_nodes:
        c: dict[str, int] = {}
        for m in nodes:
            c[m] = c.get(m, 0) + 1
        out.append(c)
    return out


@lru_cache(maxsize=4096)
def alpha_max(spec: PipelineSpec, g: int, net: Network = Network()) -> float:
    """``α^max`` (§III-B): every replica on its own server with ``B_inter/g``."""
    names, k = [], 0
    for sp in spec.stages:
        names.append([f"m{k + r}" for r in range(sp.replicas)])
        k += sp.replicas
    return iter_time(spec, counts_of(names), _Const(g), net)


class _Const(dict):
    """Mapping that answers ``g`` for every server (homogeneous cluster)."""

    def __init__(self, g: int):
        super().__init__()
        self.g = g

    def __missing__(self, key):
        return self.g


def stage_of_vertex(spec: PipelineSpec) -> list[tuple[int, int]]:
    """Vertices of the job graph: (stage, replica) in stage order."""
    return [(s, r) for s, sp in enumerate(spec.stages) for r in range(sp.replicas)]


def job_graph(spec: PipelineSpec, allreduce: str = "ring") -> dict[tuple, dict[tuple, float]]:
    """§III-B graph Ω: vertices are stage replicas; inter-stage edges between every replica
    pair of stages ``s-1`` and ``s`` weigh ``2 d^in_s / k_{s-1}``; intra-stage AllReduce edges
    form a ring (RAR) of weight ``2(k-1)/k · h`` or, with ``allreduce="tree"``, a binary tree
    (our stand-in for one of NCCL's double binary trees) of half that weight.  Symmetric
    adjacency dict ``{u: {v: w}}``."""
    adj: dict[tuple, dict[tuple, float]] = {v: {} for v in stage_of_vertex(spec)}

    def add(u, v, w):
        if u == v or w <= 0:
            return
        adj[u][v] = adj[v][u] = max(adj[u].get(v, 0.0), w)  # a 2-ring is one edge

    st = spec.stages
    for s, sp in enumerate(st):
        k = sp.replicas
        if k > 1:
            if allreduce == "tree":
                w = (k - 1) / k * sp.h
                for r in range(1, k):
                    add((s, r), (s, (r - 1) // 2), w)
            else:
                w = 2 * (k - 1) / k * sp.h
                for r in range(k):
                    add((s, r), (s, (r + 1) % k), w)
        if s > 0:
            w = 2 * sp.d_in / st[s - 1].replicas
            for a in range(st[s - 1].replicas):
                for b in range(k):
                    add((s - 1, a), (s, b), w)
    return adj
