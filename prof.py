import cProfile, pstats, sys, time
sys.path.insert(0, '.')
from gimbalctl.cluster import parse_cluster
from gimbalctl.profiles import default_models
from gimbalctl.sim import SimConfig, simulate
from gimbalctl.traces import load_trace
from policies import get_policy
pol, cl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
models = default_models()
nodes = parse_cluster(cl)
jobs = load_trace('/work/shared/traces/philly/philly.csv', models=models, limit=n or None, nodes=nodes)
p = get_policy(pol)
pr = cProfile.Profile()
c0 = time.process_time()
pr.enable()
res = simulate(jobs, nodes, p, models, SimConfig())
pr.disable()
print('cpu', time.process_time() - c0, 'calls', res.summary['policy_calls'], 'jct', res.summary['avg_jct']/3600)
st = pstats.Stats(pr); st.sort_stats('cumtime').print_stats(35)
st.sort_stats('tottime').print_stats(20)
