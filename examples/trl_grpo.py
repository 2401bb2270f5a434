"""Train a model with TRL's GRPOTrainer on Harbor tasks, through harbor_ray's online service.

Start the service first (the default model on the CPU, the capture proxy, the controller):

    serve run serve_configs/online_cpu.yaml

then, in another shell, from the repository root:

    .venv/bin/python examples/trl_grpo.py

Each step submits one group of `--num-generations` rollouts per task (terminus-2 in a
sandbox, every model call captured with its token ids and the logprobs of the
distribution it was sampled from), trains on them (one sample per rollout: the agent's
whole conversation, with only the ids the model sampled in the loss, each weighted by
its importance ratio to the logprob recorded when it was sampled, truncated at 3), then
saves the weights and loads them into the engine as the next policy version, so the next
step's rollouts run on the model just trained. Each step's log has the ratio
(`sampling/importance_sampling_ratio/*`) and the trained tokens by staleness
(`staleness/tokens_*`).

`--harnesses terminus-2 claude-code` trains the one policy through both agents at once:
each step one group per task per harness, each group one task under one harness (its
own GRPO baseline), and `harness/<agent>/*` figures in the log (docs/trainers.md,
"Mixing harnesses").

The defaults fit a 2-core CPU machine (a step takes minutes). On GPUs, serve
`serve_configs/online_gpu.yaml`, pass the same model as `--model` (a hub id or a
directory: the trainer's weights must be the served model's, same dtype), and raise
`--tasks`, `--num-generations`, `--budget` and `--max-tokens`; the trainer runs where
this script runs (`accelerate launch` works: only the main process loads the weights).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from harbor_ray.client import Client
from harbor_ray.engine.model import prepare_model
from harbor_ray.integrations.trl import (
    GroupRollouts,
    ServiceGRPOConfig,
    ServiceGRPOTrainer,
    WeightSync,
    task_dataset,
    verifier_reward,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000/online",
        help="the controller's URL (default: %(default)s)",
    )
    parser.add_argument(
        "--key-file",
        type=Path,
        default=Path("~/.cache/harbor_ray/online/controller.key"),
        help="the controller key, as the YAML's key_file (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="the served model's weights: `default` (SmolLM2-135M-Instruct, "
        "prepared offline), a directory or a hub id (default: %(default)s)",
    )
    parser.add_argument("--agent", default="terminus-2", help="default: %(default)s")
    parser.add_argument(
        "--harnesses",
        nargs="+",
        default=None,
        help="train one policy through several agents at once: one group "
        "per task per harness each step, each with its own GRPO baseline, "
        "and per-harness figures in the log (default: --agent alone)",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["hello-file", "count-words"],
        help="task names of the service's dataset (default: %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (default: 2)")
    parser.add_argument(
        "--num-generations",
        type=int,
        default=2,
        help="rollouts per task per step, GRPO's group (default: 2)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.7,
        help="sampling temperature, the rollouts' and the loss's (default: 0.7)",
    )
    parser.add_argument("--learning-rate", type=float, default=1e-5, help="default: 1e-5")
    parser.add_argument(
        "--budget", type=int, default=3, help="model calls per rollout (default: 3)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="tokens per model call (default: 64)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("trl_grpo_out"),
        help="checkpoints and TRL's output (default: %(default)s)",
    )
    parser.add_argument(
        "--drop-no-signal",
        action="store_true",
        help="have the service drop a group whose rewards are all equal and "
        "run a replacement of one of --tasks in its place",
    )
    parser.add_argument(
        "--max-extra-groups",
        type=int,
        default=None,
        help="replacements per step at most (default: the service's)",
    )
    args = parser.parse_args()

    model_dir = str(prepare_model()) if args.model == "default" else args.model
    client = Client(args.url, args.key_file.expanduser().read_text().strip())
    rollouts = GroupRollouts(
        client,
        args.agent,
        budget=args.budget,
        max_tokens=args.max_tokens,
        drop_no_signal=args.drop_no_signal or None,
        max_extra_groups=args.max_extra_groups,
        replacement_tasks=args.tasks if args.drop_no_signal else None,
    )
    sync = WeightSync(client, args.out / "checkpoints")
    # ServiceGRPOTrainer: TRL's GRPOTrainer with TRL's importance-sampling correction
    # against the recorded logprobs (per token, truncated: ServiceGRPOConfig's default).
    trainer = ServiceGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        args=ServiceGRPOConfig(
            output_dir=str(args.out / "trl"),
            max_steps=args.steps,
            per_device_train_batch_size=args.num_generations * len(args.harnesses or [None]),
            num_generations=args.num_generations,
            temperature=args.temperature,
            learning_rate=args.learning_rate,
            beta=0.0,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            bf16=False,
        ),
        train_dataset=task_dataset(args.tasks, args.harnesses),
        reward_funcs=verifier_reward,
        rollout_func=rollouts,
        callbacks=[sync],
    )
    trainer.train()
    # What was trained and served, one JSON line: TRL's logs per step, and each weight
    # update's version and seconds.
    print(
        json.dumps(
            {
                "policy_version": client.policy().version,
                "weight_updates": sync.updates,
                "log": trainer.state.log_history,
            }
        )
    )
    client.close()


if __name__ == "__main__":
    main()
