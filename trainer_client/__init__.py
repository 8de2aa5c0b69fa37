"""The trainer: GRPO on SWE tasks served by env server replicas, plus two extra loss channels.

- trainer.py `SweGRPOTrainer` (TRL's GRPOTrainer with a concurrent tool phase), config.py
  `RunConfig` (the YAML run config), environment.py (env sessions for TRL's environment_factory);
  run.py `train` runs one training;
- losses/: the loss channels, one registry (losses/channels.py): `hints` (channel 2, hints_channel.py:
  self-distillation from the same model given a hint at error sites) and `pairs` (channel 3,
  pairs_channel.py: DPO/SimPO on teacher pairs), combined by compose.py and mixin.py;
- replay/: teachers replaying frozen traces into the pairs channel 3 trains on (offline, or in
  the background of a run: replay/during_training.py);
- cli.py: `trainer-client train|warmstart|ablate|replay|evaluate|tasks` (`replay`'s options: replay/cli.py;
  `evaluate` and `tasks`: evaluation/cli.py),
  the only modules that turn errors into exit codes; warmstart.py, ablate.py, memory_estimate.py
  (`--dry-run`) and tiny_qwen.py (the CPU smoke model) are library code behind the commands.
"""
