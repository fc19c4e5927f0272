"""Workflows: what a ``ptm`` command does from start to end, each reading top-down like a recipe.

``pretrain`` (and ``static`` for the first-generation models), ``finetune`` (several seeds,
inits and learning rates), ``generate``, ``evaluate``, ``learning_curve``, ``compare``, ``demo``
and ``demo_zh`` compose the core modules (data, tokenization, encoders, objectives, the Trainer,
tasks); ``rundir`` holds the one policy for a run directory (new, resume, overwrite, continue) and
``report`` the tables, summaries and plots they share.  Core modules never import a workflow;
this package imports nothing at import time, so each workflow loads only what it needs.
"""
