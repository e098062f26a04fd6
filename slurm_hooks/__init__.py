"""Slurm-side pieces of gimbal: job_submit.lua, node Prolog/Epilog/TaskProlog and gsbatch.

The shell and Lua files are installed on the Slurm controller / nodes (see docs/slurm.md);
:mod:`slurm_hooks.gsbatch` is the ``gsbatch`` sbatch wrapper.
"""
