"""The reward rule: forwarded verbatim, each key judged on its own, the scalar chosen explicitly."""

from __future__ import annotations

import math

import pytest

from harbor_ray.trials.rewards import RewardChoice, RewardCode, findings_for, select_reward


def codes(choice: RewardChoice) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in findings_for(choice)]


def test_a_verifier_that_never_ran_gives_none_not_zero_and_no_error():
    choice = select_reward(None)
    assert choice == RewardChoice(reward=None, reward_key=None)
    assert findings_for(choice) == []


def test_a_wrong_answer_stays_zero():
    choice = select_reward({"reward": 0.0})
    assert choice.reward == 0.0
    assert choice.reward is not None
    assert (choice.reward_key, choice.error, findings_for(choice)) == ("reward", None, [])


def test_an_int_is_forwarded_as_a_float():
    choice = select_reward({"reward": 1})
    assert choice.reward == 1.0 and isinstance(choice.reward, float)
    assert choice.rewards == {"reward": 1.0}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "null"),
        (math.nan, "not finite (nan)"),
        (math.inf, "not finite (inf)"),
        (-math.inf, "not finite (-inf)"),
        ("high", "text ('high'), not a number"),
        ("1.0", "text ('1.0'), not a number"),
        (True, "a boolean (true) is not a reward; write 1 or 0"),
        (False, "a boolean (false) is not a reward; write 1 or 0"),
        ({"score": 1}, "a nested dict, not a number"),
        ([1.0], "a nested list, not a number"),
        (10**400, "too large for a float"),
        (1j, "a complex, not a number"),
    ],
)
def test_an_unusable_side_key_is_dropped_named_and_the_rollout_still_has_its_reward(value, reason):
    choice = select_reward({"reward": 0.5, "side": value})
    assert choice.reward == 0.5
    assert choice.rewards == {"reward": 0.5}
    assert choice.dropped == (("side", reason),)
    assert choice.error is None
    [finding] = findings_for(choice)
    assert (finding.code, finding.severity) == ("reward_key_dropped", "warn")
    assert finding.message == f"reward key 'side' dropped: {reason}"


@pytest.mark.parametrize("value", [None, math.nan, "1.0", True, {"a": 1}])
def test_the_only_key_unusable_fails_and_is_not_reported_twice(value):
    choice = select_reward({"score": value})
    assert (choice.reward, choice.reward_key, choice.rewards) == (None, "score", {})
    assert choice.problem is RewardCode.UNUSABLE
    assert choice.error is not None and choice.error.startswith("reward key 'score' is unusable: ")
    assert codes(choice) == [("reward_unusable", "fatal")]


def test_the_only_key_is_chosen_whatever_its_name():
    choice = select_reward({"pass_rate": 0.25})
    assert (choice.reward, choice.reward_key) == (0.25, "pass_rate")


def test_only_key_means_the_only_key_written_not_the_only_usable_one():
    # Training on the penalty because the metric went null would be a silent swap.
    choice = select_reward({"accuracy": None, "length_penalty": 0.3})
    assert (choice.reward, choice.reward_key) == (None, None)
    assert choice.rewards == {"length_penalty": 0.3}
    assert choice.problem is RewardCode.AMBIGUOUS
    assert codes(choice) == [("reward_key_dropped", "warn"), ("reward_ambiguous", "fatal")]


def test_several_keys_with_reward_choose_reward_and_keep_the_rest():
    choice = select_reward({"tests_passed": 3, "reward": 0.75, "time": 12.5})
    assert (choice.reward, choice.reward_key) == (0.75, "reward")
    assert choice.rewards == {"tests_passed": 3.0, "reward": 0.75, "time": 12.5}
    assert findings_for(choice) == []


def test_several_keys_without_reward_are_refused_naming_every_key():
    choice = select_reward({"a": 1.0, "b": 0.0})
    assert (choice.reward, choice.reward_key, choice.problem) == (None, None, RewardCode.AMBIGUOUS)
    assert choice.error == (
        "cannot choose among reward keys ('a', 'b'): name the key to train on, "
        "or have the verifier write one named 'reward'"
    )
    assert choice.rewards == {"a": 1.0, "b": 0.0}  # still forwarded
    [finding] = findings_for(choice)
    assert (finding.code, finding.severity, finding.message) == (
        "reward_ambiguous",
        "fatal",
        choice.error,
    )


def test_a_named_key_wins_over_reward():
    choice = select_reward({"reward": 1.0, "partial": 0.4}, key="partial")
    assert (choice.reward, choice.reward_key, choice.error) == (0.4, "partial", None)


def test_a_named_key_that_is_missing_names_the_keys_that_exist():
    choice = select_reward({"reward": 1.0, "partial": 0.4}, key="accuracy")
    assert (choice.reward, choice.reward_key, choice.problem) == (
        None,
        "accuracy",
        RewardCode.KEY_MISSING,
    )
    assert choice.error == (
        "reward key 'accuracy' is not among the verifier's keys ('reward', 'partial')"
    )
    assert codes(choice) == [("reward_key_missing", "fatal")]


def test_a_named_key_that_is_unusable_fails_while_an_unusable_side_key_only_warns():
    choice = select_reward({"reward": 1.0, "partial": math.nan, "x": "n/a"}, key="partial")
    assert (choice.reward, choice.reward_key) == (None, "partial")
    assert choice.error == "reward key 'partial' is unusable: not finite (nan)"
    assert choice.dropped == (("partial", "not finite (nan)"), ("x", "text ('n/a'), not a number"))
    assert codes(choice) == [("reward_key_dropped", "warn"), ("reward_unusable", "fatal")]


def test_a_named_key_on_the_only_key_dict_is_still_checked():
    choice = select_reward({"reward": 1.0}, key="Reward")
    assert choice.problem is RewardCode.KEY_MISSING


def test_an_empty_dict_is_refused():
    choice = select_reward({})
    assert (choice.reward, choice.reward_key, choice.problem) == (None, None, RewardCode.EMPTY)
    assert codes(choice) == [("reward_empty", "fatal")]


def test_a_named_key_on_an_empty_dict_says_there_are_no_keys():
    choice = select_reward({}, key="reward")
    assert choice.error == "reward key 'reward' is not among the verifier's keys (none)"


def test_negative_and_large_finite_rewards_are_forwarded_verbatim():
    choice = select_reward({"reward": -3.5, "big": 10**20})
    assert choice.rewards == {"reward": -3.5, "big": 1e20}
    assert choice.reward == -3.5


def test_the_choice_is_immutable():
    choice = select_reward({"reward": 1.0})
    with pytest.raises(AttributeError):
        choice.reward = 0.0  # type: ignore[misc]
