import pytest

from launcher.slurm import (HostlistError, SlurmEnvError, count_visible_gpus, expand_hostlist,
                            parse_allocation, rendezvous_port)


@pytest.mark.parametrize("expr,hosts", [
    ("node[01-03,7],gpu5", ["node01", "node02", "node03", "node7", "gpu5"]),
    ("gpu07", ["gpu07"]),
    ("a,b,c", ["a", "b", "c"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("gpu[07-08],cpu[1,3]-ib", ["gpu07", "gpu08", "cpu1-ib", "cpu3-ib"]),
])
def test_expand_hostlist(expr, hosts):
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("bad", ["", "node[1-", "node]1", "node[3-1]", "node[a-b]", "n[[1]]", "a,,b"])
def test_expand_hostlist_rejects(bad):
    with pytest.raises(HostlistError):
        expand_hostlist(bad)


def test_port_formula():
    assert rendezvous_port(48213) == 18213
    assert rendezvous_port(20000) == 10000
    assert all(10000 <= rendezvous_port(j) < 30000 for j in (1, 19999, 123456789))


def test_parse_fixture(slurm_env_2node):
    a = parse_allocation(slurm_env_2node)
    assert a.job_id == "48213" and a.nnodes == 2 and a.hosts == ("gpu07", "gpu08")
    assert a.is_host and a.rdzv_host == "gpu07" and a.rdzv_port == 18213 and a.gpus_on_node == 4


def test_node_rank_from_nodename(slurm_env_2node):
    env = dict(slurm_env_2node)
    del env["SLURM_NODEID"]
    env["SLURMD_NODENAME"] = "gpu08"
    a = parse_allocation(env)
    assert a.node_rank == 1 and not a.is_host


@pytest.mark.parametrize("var,value,msg", [
    ("SLURM_JOB_ID", None, "SLURM_JOB_ID"),
    ("SLURM_JOB_ID", "abc", "SLURM_JOB_ID"),
    ("SLURM_JOB_NUM_NODES", "3", "SLURM_JOB_NUM_NODES"),
    ("SLURM_JOB_NODELIST", "gpu[07-", "SLURM_JOB_NODELIST"),
    ("SLURM_NTASKS_PER_NODE", "4", "SLURM_NTASKS_PER_NODE"),
    ("SLURM_NODEID", "5", "SLURM_NODEID"),
    ("SLURM_GPUS_ON_NODE", "four", "SLURM_GPUS_ON_NODE"),
])
def test_bad_env_names_variable(slurm_env_2node, var, value, msg):
    env = dict(slurm_env_2node)
    if value is None:
        env.pop(var)
    else:
        env[var] = value
    with pytest.raises(SlurmEnvError) as ei:
        parse_allocation(env)
    assert msg in str(ei.value)


def test_missing_nodelist(slurm_env_2node):
    env = {k: v for k, v in slurm_env_2node.items() if "NODELIST" not in k}
    with pytest.raises(SlurmEnvError, match="SLURM_JOB_NODELIST"):
        parse_allocation(env)


def test_count_gpus():
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert count_visible_gpus({"SLURM_GPUS_ON_NODE": "8", "CUDA_VISIBLE_DEVICES": "0"}) == 8
    assert count_visible_gpus({}) is None


def test_step_on_fewer_nodes_than_the_job_is_an_error(slurm_env_2node):
    # srun -N1 gimbal-run in a 2-node job: torchrun --nnodes=2 would wait forever
    env = dict(slurm_env_2node, SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="gpu07")
    with pytest.raises(SlurmEnvError, match="SLURM_STEP_NUM_NODES"):
        parse_allocation(env)
