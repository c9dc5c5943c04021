"""Models and what carries them: building and loading (:mod:`.modeling`, :mod:`.model_source`,
:mod:`.base_model`), LoRA, prompting (chat templates), the DeepSpeed training engine and checkpoints."""
