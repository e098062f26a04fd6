"""GPU types: the bundled Gavel-derived table, a site's [gpu_types], heterogeneous
--cluster specs, and the registry's import errors."""
import json
import sys
import types

import pytest
from click.testing import CliRunner

from gimbalctl.cli import main
from gimbalctl.cluster import parse_cluster
from gimbalctl.config import ConfigError, load
from gimbalctl.gpu_types import default_table, derive
from gimbalctl.profiles import default_models

def test_derive_takes_the_geometric_mean_over_batch_variants():
    gavel = {t: {} for t in ("k80", "p100", "v100")}
    for bs, (k80, v100) in {16: (1.0, 4.0), 32: (1.0, 16.0)}.items():
        key = str((f"ResNet-18 (batch size {bs})", 1))
        gavel["k80"][key] = {"null": k80}
        gavel["v100"][key] = {"null": v100}
        gavel["p100"][key] = {"null": v100}
    gavel["k80"][str(("ResNet-18 (batch size 16)", 2))] = {"null": 99.0}  # scale 2: ignored
    out = derive(gavel)
    assert out["speeds"]["cifar10"] == {"k80": 0.125, "p100": 1.0, "v100": 1.0}  # sqrt(1/4 * 1/16)
    assert out["speeds"]["imagenet"] == {}  # no ResNet-50 rows


def test_bundled_speeds_follow_gavels_measurements():
    t = default_table()
    for app in ("cifar10", "imagenet", "bert", "yolov3"):
        # Gavel: K80 slower than P100, P100 slower than V100 (reference) for these models
        assert t.speed(app, "k80") < t.speed(app, "p100") < t.speed(app, "v100") == 1.0
    assert t.speed("cifar10", "gpu") == 1.0  # an untyped cluster keeps the profiled speed
    assert default_models().gpu_types is t


def test_bundled_table_is_what_derive_gives_from_gavels_file():
    """data/gpu_types.json is exactly ``derive`` of Gavel's simulation_throughputs.json (the
    shared trace collection's copy; ``python -m gimbalctl.gpu_types`` regenerates it)."""
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    src = next((d / "traces" / "gavel" / "simulation_throughputs.json"
                for d in (Path(os.environ.get("GIMBAL_SHARED", root.parent / "shared")),
                          Path("/work/shared"))
                if (d / "traces" / "gavel" / "simulation_throughputs.json").is_file()), None)
    if src is None:
        pytest.skip("the shared trace collection (traces/gavel) is not on this machine")
    shipped = json.loads((root / "gimbalctl" / "data" / "gpu_types.json").read_text())
    assert derive(json.loads(src.read_text())) == shipped


def test_site_gpu_types_add_and_override(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[gpu_types.A100]\nspeed = 2.5\nmemory_mb = 40960\n'
                 '[gpu_types.k80]\nspeed = 0.5\n')
    m = load(str(f)).models()
    assert m.gpu_types.speed("cifar10", "a100") == 2.5
    assert m.gpu_types.speed("imagenet", "k80") == 0.5  # the site's figure wins
    assert m.gpu_types.speed("imagenet", "p100") == default_table().speed("imagenet", "p100")
    assert m.gpu_types.memory_mb["a100"] == 40960


@pytest.mark.parametrize("body,msg", [
    ('[gpu_types.a100]\nspeed = -1\n', "positive number"),
    ('[gpu_types.a100]\nflops = 3\n', "unknown key 'flops'"),
    ('[gpu_types]\na100 = 3\n', "must be a \\[gpu_types.<type>\\] table"),
])
def test_bad_site_gpu_types_name_the_entry(tmp_path, body, msg):
    f = tmp_path / "g.toml"
    f.write_text(body)
    with pytest.raises(ConfigError, match=msg):
        load(str(f))


def test_heterogeneous_cluster_spec_takes_type_memory():
    nodes = parse_cluster("2x4:V100,1x4:k80,1x2:t4:8192")
    assert [n.gpu_type for n in nodes] == ["v100", "v100", "k80", "t4"]
    assert [n.gpu_mem_mb for n in nodes] == [16384, 16384, 12288, 8192]


def test_cli_simulates_a_heterogeneous_cluster(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[gpu_types.fast]\nspeed = 4.0\n')
    runner = CliRunner()
    slow = runner.invoke(main, ["simulate", "--limit", "20", "--policy", "fifo", "--json",
                                "--cluster", "4x4:v100,4x4:k80"])
    fast = runner.invoke(main, ["simulate", "--limit", "20", "--policy", "fifo", "--json",
                                "--cluster", "8x4:fast", "--gpu-types", str(f)])
    assert slow.exit_code == 0, slow.output
    assert fast.exit_code == 0, fast.output
    a = json.loads(slow.output)["results"]["fifo"]["avg_jct"]
    b = json.loads(fast.output)["results"]["fifo"]["avg_jct"]
    assert b < a


def test_registry_reports_a_module_that_fails_to_import(monkeypatch):
    from policies import registry
    mod = types.ModuleType("policies._broken_for_test")
    monkeypatch.setitem(sys.modules, "policies._broken_for_test", None)  # import fails
    monkeypatch.setattr(registry, "_MODULES", registry._MODULES + ("policies._broken_for_test",))
    with pytest.raises(registry.PolicyImportError, match="policies._broken_for_test"):
        registry.names()
    del mod
