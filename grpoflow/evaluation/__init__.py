"""Evaluation: accuracy of a policy on prompts with reference answers (:mod:`.accuracy`) and the
GRPO-vs-PPO comparison (:mod:`.compare`)."""
