"""gimbal launcher: ``gimbal-run`` and the training-side library.

Seed 004 (GIMBAL) mechanisms implemented here: LISS input-sample stealing
(``launcher.stealing``), LGRR MPS limits (``launcher.mps``) with squeeze/swell
via checkpoint + relaunch (``launcher.checkpoint``, ``launcher.run``), the
runtime monitor (``launcher.monitor``, ``launcher.report``) and gradient
accumulation for the decided sub-batch (``launcher.accum``).

Importing this package does not import torch.
"""
from .envvars import TrainingConfig, config

__all__ = ["TrainingConfig", "config"]
__version__ = "0.1.0"
