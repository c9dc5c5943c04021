"""Stage ``grpo``: GRPO on DeepSpeed from the SFT reference, resumable from its checkpoints.

python -m tasks.grpo --params params/default.yaml            # one process
torchrun --nproc_per_node=2 -m tasks.grpo --params ...        # several (CPU: gloo; GPU: nccl)
"""

from tasks.rl_stage import cli

if __name__ == "__main__":
    cli("grpo", __doc__)
