"""gimbalctl: CLI, simulator, Slurm backend, daemon, state store, traces and reports."""
