"""The supervised trainers beside RL: the SFT reference policy (:mod:`.sft`) and the
Bradley-Terry reward model (:mod:`.reward_model`). The RL loop,
:class:`grpoflow.rl.trainer.Trainer`, lives in ``rl/`` with the pieces its algorithms are made
of: here it would make ``rl/`` and ``trainers/`` import each other."""
