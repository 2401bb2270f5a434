"""`ServiceGRPOTrainer`: TRL's importance-sampling correction against the logprobs the
service recorded, on samples fabricated as `GroupRollouts` returns them, scored by a tiny
random model on the CPU (seconds; nothing downloaded).

Each sample's recorded logprobs are the model's own minus a known offset per token, so
the ratio TRL must compute, `exp(logp_model - logp_recorded)` truncated at the cap, is
known from the model's logprobs re-computed here (tests/fixtures/policy_step.py); one
sample is a version behind, one two, one crossed an update, one has a tool-output token
(no logprob, `env_mask` 0).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

from harbor_ray.errors import TrainerError
from harbor_ray.integrations.trl import (
    ServiceGRPOConfig,
    ServiceGRPOTrainer,
    task_dataset,
    verifier_reward,
)
from tests.fixtures.policy_step import token_logprobs

VOCAB = 32
TEMPERATURE = 0.7
CAP = 3.0  # TRL's vllm_importance_sampling_clip_max default
CURRENT = 3  # the policy version serving at submit
PROMPT = [5, 6, 7]  # one length for all: TRL left-pads prompts, which shifts positions

# (completion ids, env_mask, per-token offset logp_model - logp_recorded (None: no
# logprob recorded), per-token policy version, reward)
SAMPLES: list[tuple[list[int], list[int], list[float | None], list[int | None], float]] = [
    # fresh: recorded by the policy being trained
    ([8, 9, 10, 11], [1, 1, 1, 1], [0.0, 0.0, 0.0, 0.0], [3, 3, 3, 3], 1.0),
    # one version stale, and a tool-output token; exp(1.5) is past the cap
    ([12, 13, 14, 15, 16], [1, 1, 0, 1, 1], [0.5, 1.5, None, -0.7, 0.0], [2, 2, None, 2, 2], 0.0),
    # two versions stale; exp(2.0) is past the cap
    ([17, 18, 19], [1, 1, 1], [0.2, 2.0, -0.3], [1, 1, 1], 0.5),
    # one call crossed a weight update: its first token is a version behind
    ([20, 21, 22], [1, 1, 1], [0.4, 0.0, 0.0], [2, 3, 3], 0.25),
]


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    words = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=words, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


@pytest.fixture
def model() -> LlamaForCausalLM:
    return tiny_model()


def tiny_model() -> LlamaForCausalLM:
    """A one-layer Llama over `VOCAB` ids, random (seeded): seconds on a CPU."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        initializer_range=0.5,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config).float()


def model_logprobs(model: Any) -> list[list[float]]:
    """The model's logprob of each completion token at the sampling temperature, computed
    here, apart from TRL."""
    with torch.no_grad():
        return [
            token_logprobs(
                model, PROMPT + ids, [0] * len(PROMPT) + [1] * len(ids), TEMPERATURE
            ).tolist()
            for ids, *_ in SAMPLES
        ]


def recorded(model: Any) -> list[list[float | None]]:
    """What the engine recorded: the model's logprob less the sample's offset."""
    return [
        [None if off is None else lp - off for lp, off in zip(lps, offsets, strict=True)]
        for lps, (_, _, offsets, _, _) in zip(model_logprobs(model), SAMPLES, strict=True)
    ]


def rollout_func(logprobs: list[list[float | None]]) -> Any:
    """A `rollout_func` returning the fabricated samples in `GroupRollouts`' columns."""

    def rollouts(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        assert len(prompts) == len(SAMPLES)
        return {
            "prompt_ids": [list(PROMPT) for _ in SAMPLES],
            "completion_ids": [list(ids) for ids, *_ in SAMPLES],
            "logprobs": logprobs,
            "env_mask": [list(mask) for _, mask, *_ in SAMPLES],
            "policy_versions": [list(versions) for *_, versions, _ in SAMPLES],
            "policy_version": [CURRENT] * len(SAMPLES),
            "reward": [reward for *_, reward in SAMPLES],
        }

    return rollouts


def trainer(model: Any, tmp_path: Path, **config: Any) -> ServiceGRPOTrainer:
    args = ServiceGRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=len(SAMPLES),
        num_generations=2,
        temperature=TEMPERATURE,
        beta=0.0,
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        **config,
    )
    built = ServiceGRPOTrainer(
        model=model,
        reward_funcs=verifier_reward,
        args=args,
        train_dataset=task_dataset(["t"]),
        processing_class=tokenizer(),
        rollout_func=rollout_func(recorded(model)),
    )
    built.model.train()
    return built


def score(built: ServiceGRPOTrainer) -> dict[str, Any]:
    """TRL's scoring step on one generation batch (each dict is TRL's row of a prompt)."""
    return built._generate_and_score_completions([{"prompt": "t"} for _ in SAMPLES])


def expected_ratios(model: Any, width: int) -> torch.Tensor:
    """exp(logp_model - logp_recorded), truncated at the cap, from the model's logprobs
    re-computed here; 1 where no logprob was recorded and past the completion."""
    rows = []
    for lps, recs in zip(model_logprobs(model), recorded(model), strict=True):
        row = [
            1.0 if rec is None else min(math.exp(lp - rec), CAP)
            for lp, rec in zip(lps, recs, strict=True)
        ]
        rows.append(row + [1.0] * (width - len(row)))
    return torch.tensor(rows)


def test_stale_tokens_are_weighted_by_their_truncated_importance_ratio(
    model: Any, tmp_path: Path
) -> None:
    output = score(trainer(model, tmp_path))
    ratio = output.get("importance_sampling_ratio")
    assert ratio is not None, "no importance-sampling ratio: the correction did not run"
    torch.testing.assert_close(ratio, expected_ratios(model, ratio.shape[1]), rtol=1e-4, atol=1e-5)
    # The known offsets: exp(0.5) and exp(-0.7) as they are, exp(1.5) at the cap, and
    # the tool-output token untouched.
    assert ratio[1, :5].tolist() == pytest.approx(
        [math.exp(0.5), CAP, 1.0, math.exp(-0.7), 1.0], rel=1e-4
    )


def test_with_the_correction_off_no_ratio_reaches_the_loss(model: Any, tmp_path: Path) -> None:
    built = trainer(model, tmp_path, vllm_importance_sampling_correction=False)
    output = score(built)
    assert "importance_sampling_ratio" not in output
    assert not any(key.startswith("sampling/importance") for key in built._metrics["train"])
    assert built._metrics["train"]["staleness/tokens_1"] == [5.0]  # still logged


def test_the_loss_is_weighted_by_the_ratio(model: Any, tmp_path: Path) -> None:
    """TRL's loss multiplies each token's term by the ratio (linear in it, beta 0)."""
    built = trainer(model, tmp_path)
    output = score(built)
    built.model.eval()  # no gradient accumulation to scale by

    def loss(ratio: torch.Tensor) -> float:
        with torch.no_grad():
            return float(
                built.compute_loss(built.model, {**output, "importance_sampling_ratio": ratio})
            )

    weighted = loss(output["importance_sampling_ratio"])
    assert weighted == pytest.approx(loss(2 * output["importance_sampling_ratio"]) / 2, rel=1e-5)
    assert weighted != pytest.approx(loss(torch.ones_like(output["importance_sampling_ratio"])))


def test_the_ratio_clipping_and_staleness_are_logged_through_trls_metrics(
    model: Any, tmp_path: Path
) -> None:
    built = trainer(model, tmp_path)
    output = score(built)
    trained = (output["completion_mask"] * output["tool_mask"]).bool()
    ratios = expected_ratios(model, trained.shape[1])[trained]
    metrics = built._metrics["train"]
    print(
        {
            key: values
            for key, values in metrics.items()
            if key.startswith(("sampling/", "staleness/"))
        }
    )
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(
        [ratios.mean().item()], rel=1e-4
    )
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(
        [math.exp(-0.7)], rel=1e-4
    )
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx([CAP])
    # exp(1.5) and exp(2.0) truncated, of 14 trained tokens (the tool output is not one)
    assert metrics["sampling/importance_sampling_ratio/clipped_fraction"] == [2 / 14]
    assert (
        metrics["staleness/tokens_0"],
        metrics["staleness/tokens_1"],
        metrics["staleness/tokens_2+"],
    ) == ([6.0], [5.0], [3.0])
    # TRL's log step averages them into the step's log, which report_to sends on.
    built.log({})
    logged = built.state.log_history[-1]
    assert logged["staleness/tokens_2+"] == 3.0
    assert logged["sampling/importance_sampling_ratio/clipped_fraction"] == 2 / 14


def test_a_token_masking_mode_counts_its_masked_tokens(model: Any, tmp_path: Path) -> None:
    built = trainer(model, tmp_path, vllm_importance_sampling_mode="token_mask")
    ratio = score(built)["importance_sampling_ratio"]
    assert ratio[1, 1].item() == ratio[2, 1].item() == 0.0  # past the cap: masked
    assert built._metrics["train"]["sampling/importance_sampling_ratio/clipped_fraction"] == [
        2 / 14
    ]


def test_a_setup_the_trainer_cannot_correct_is_refused(model: Any, tmp_path: Path) -> None:
    args = ServiceGRPOConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to=[])
    with pytest.raises(TrainerError, match="rollout_func=GroupRollouts"):
        ServiceGRPOTrainer(
            model=model, reward_funcs=verifier_reward, args=args, processing_class=tokenizer()
        )
    vllm = GRPOConfig(
        output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to=[], use_vllm=True
    )
    with pytest.raises(TrainerError, match="set use_vllm=False"):
        ServiceGRPOTrainer(
            model,
            verifier_reward,
            vllm,
            processing_class=tokenizer(),
            rollout_func=rollout_func(recorded(model)),
        )
