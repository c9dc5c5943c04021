"""The supervised trainers beside RL: the SFT reference policy (:mod:`.sft`) and the
Bradley-Terry reward model (:mod:`.reward_model`)."""
