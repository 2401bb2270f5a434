"""When a dead host's journal may go: once every row rebuilt from it is committed."""

from __future__ import annotations

from harbor_ray.cluster.journal_debts import JournalDebts


def test_a_journal_goes_once_the_last_row_rebuilt_from_it_is_committed() -> None:
    debts = JournalDebts()
    assert not debts.read("h1", ["a", "b"])
    debts.made("a@h1", "h1", "a")  # a retried lost try: a row of its own
    assert debts.committed(["a@h1"]) == []  # b's row is still only in the journal
    debts.made("b", "h1", "b")  # b's last try: the row under its own id
    assert debts.committed(["c", "b"]) == ["h1"]  # c was never rebuilt from a journal
    assert debts.committed(["b"]) == []  # once


def test_a_row_committed_before_another_is_made_keeps_the_journal() -> None:
    """Rows from one journal are made one by one: the first committed frees nothing
    while another rollout read there has no row yet."""
    debts = JournalDebts()
    debts.read("h1", ["a", "b"])
    debts.made("a@h1", "h1", "a")
    assert debts.committed(["a@h1"]) == []
    debts.made("b@h1", "h1", "b")
    assert debts.committed(["b@h1"]) == ["h1"]


def test_an_empty_journal_may_go_at_once_and_hosts_are_apart() -> None:
    debts = JournalDebts()
    assert debts.read("h0", [])
    debts.read("h1", ["a"])
    debts.read("h2", ["a"])  # the retry of a, lost again on another host
    debts.made("a@h1", "h1", "a")
    debts.made("a", "h2", "a")
    assert debts.committed(["a"]) == ["h2"]
    assert debts.committed(["a@h1"]) == ["h1"]
