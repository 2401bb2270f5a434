"""One SkyRL generation step on Harbor tasks, through harbor_ray's online service.

Start the service first (the default model on the CPU, the capture proxy, the controller):

    serve run serve_configs/online_cpu.yaml

then, in another shell, from the repository root:

    .venv/bin/python examples/skyrl_generate.py --tasks hello-file count-words

SkyRL builds its generator input from the prompts (`prepare_generator_input`:
`--num-generations` rows per task, one instance id each), `ServiceGenerator` runs each
block as one group of rollouts on the service (terminus-2 in a sandbox, every model call
captured with its token ids and logprobs), and SkyRL's own `validate_generator_output`
checks what comes back: one row per rollout, the agent's whole conversation, with only
the ids the model sampled in `loss_masks` and their recorded logprobs in
`rollout_logprobs`. It prints, per row, the task, reward, tokens and trained tokens, and
the call's figures (`rollout_metrics`).

This is the step a SkyRL trainer runs before each update (its `generate`). Training
itself runs in SkyRL's Ray workers (FSDP, GPUs): pass a `ServiceGenerator` from
`BasePPOExp.get_generator`, and see docs/trainers.md ("SkyRL") for what that does and
does not carry yet (weights are not loaded into the service's engine after each update).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.utils.trainer_utils import validate_generator_output

from harbor_ray.client import Client
from harbor_ray.integrations.skyrl import ServiceGenerator
from harbor_ray.integrations.trl import GroupRollouts


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
    parser.add_argument("--agent", default="terminus-2", help="default: %(default)s")
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["hello-file", "count-words"],
        help="task names of the service's dataset (default: %(default)s)",
    )
    parser.add_argument(
        "--num-generations",
        type=int,
        default=2,
        help="rollouts per task: SkyRL's n_samples_per_prompt (default: %(default)s)",
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="default: %(default)s")
    parser.add_argument(
        "--max-tokens", type=int, default=256, help="tokens per model call (default: %(default)s)"
    )
    parser.add_argument(
        "--budget", type=int, default=4, help="model calls per rollout (default: %(default)s)"
    )
    parser.add_argument(
        "--pad-id",
        type=int,
        default=2,
        help="an id of the trainer's tokenizer for rollouts with nothing to "
        "train: its pad_token_id (default: %(default)s, the default model's)",
    )
    args = parser.parse_args()
    key = args.key_file.expanduser().read_text().strip()
    with Client(args.url, key) as client:
        generator = ServiceGenerator(
            GroupRollouts(
                client,
                args.agent,
                budget=args.budget,
                max_tokens=args.max_tokens,
                filler_id=args.pad_id,
            )
        )
        print(
            json.dumps(
                generate_step(generator, args.tasks, args.num_generations, args.temperature),
                indent=1,
            )
        )


def generate_step(
    generator: ServiceGenerator, tasks: list[str], n: int, temperature: float, global_step: int = 1
) -> dict[str, Any]:
    """SkyRL's generation step for `tasks`: its input built and its output checked by
    SkyRL's own functions; what came back, per row, and the call's figures."""
    rows = [
        {
            "prompt": [{"role": "user", "content": task}],
            "env_class": None,
            "env_extras": {"task": task},
            "uid": f"{i}-{task}",
        }
        for i, task in enumerate(tasks)
    ]
    batch, uids = prepare_generator_input(
        rows, n, {"temperature": temperature}, "harbor", "train", global_step
    )
    output = asyncio.run(generator.generate(batch))
    validate_generator_output(len(uids), output)
    return {
        "rows": [
            {
                "task": (extra or {}).get("task"),
                "uid": uid,
                "reward": reward,
                "tokens": len(prompt) + len(response),
                "trained_tokens": sum(mask),
            }
            for extra, uid, reward, prompt, response, mask in zip(
                batch["env_extras"] or [],
                uids,
                output["rewards"],
                output["prompt_token_ids"],
                output["response_ids"],
                output["loss_masks"],
                strict=True,
            )
        ],
        "rollout_metrics": output["rollout_metrics"],
    }


if __name__ == "__main__":
    main()
