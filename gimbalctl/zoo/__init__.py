"""Reference model zoo for the model-similarity policy (seed 002): torch definitions
(``nets``) and their measured characteristics (``features``).  Needs torch."""
