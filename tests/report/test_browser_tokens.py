"""The token view in headless Chromium: each id shown as its text, a toggle to the ids,
a note and ids without a tokenizer; no JavaScript errors and no horizontal overflow at
a desktop and a phone width."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from harbor_ray.report import write_report
from tests.data.rollouts import rich_session, rollout
from tests.report.browser import chromium, js_errors, wait_for
from tests.report.datasets import byte_level_tokenizer, worded_rollout, write_dataset

pytestmark = pytest.mark.integration  # Chromium: seconds per page

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTHS = {"desktop": (1400, 1000), "phone": (390, 844)}
# "hé 🤖\n": é is one id, the emoji four (bytes f0 9f a4 96), and the newline one.
SHOWN = ["h", "é", "·", "\\xf0", "\\x9f", "\\xa4", "🤖", "↵"]
IDS = ["71", "256", "220", "172", "253", "97", "244", "198"]

TAIL = ["ok"] * 17  # 20 turns in all: drawn a slice at a time
FIRST_TURN = "#turn-0 .sampled-ids .tok"
LABELS = f"return [...document.querySelectorAll('{FIRST_TURN}')].map(s => s.textContent)"


def _open(driver, page: Path, rollout_id: str, width: int, height: int) -> None:
    # Headless Chromium keeps its window at least 500 px wide: a phone is emulated.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500},
    )
    driver.get(page.as_uri())
    wait_for(lambda: driver.execute_script("return window.harborReport"), what="the page")
    driver.execute_script(f"window.harborReport.select({rollout_id!r})")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, FIRST_TURN), what="the tokens")


def _overflow(driver) -> list[str]:
    """The page's horizontal overflow in px, and the elements reaching past its width."""
    return driver.execute_script("""
        const root = document.documentElement, width = root.clientWidth;
        if (root.scrollWidth <= width) return [];
        return [`${root.scrollWidth - width} px`, ...[...document.querySelectorAll("body, body *")]
          .filter((e) => e.getBoundingClientRect().right > width + 1 || e.scrollWidth > width)
          .map((e) => `${e.tagName}#${e.id}.${e.className} ${e.scrollWidth}`)];""")


def test_tokens_show_as_text_and_toggle_to_ids(tmp_path: Path) -> None:
    tokenizer = byte_level_tokenizer(tmp_path / "tok")
    out = write_dataset(
        tmp_path / "out",
        [
            worded_rollout(
                "a1", str(tokenizer), tokenizer, ["hé 🤖\n", "done<|end|>", "x " * 400, *TAIL]
            )
        ],
    )
    page = write_report(out)
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium() as driver:
        for name, (width, height) in WIDTHS.items():
            _open(driver, page, "a1", width, height)
            assert driver.execute_script(LABELS) == SHOWN
            assert (
                driver.execute_script(
                    f"return [...document.querySelectorAll('{FIRST_TURN}')].map(s => s.dataset.id)"
                )
                == IDS
            )
            # The pieces' texts, in order, are the decoded reply: nothing merged or lost.
            assert (
                driver.execute_script(
                    "const t = window.harborReport.doc.traces.a1.turns[0];"
                    "return HarborTokens.pieces(t.token_ids, window.harborReport.doc.tokens.pieces)"
                    ".map(p => p.text).join('')"
                )
                == "hé 🤖\n"
            )
            assert driver.find_elements(By.CSS_SELECTOR, "#turn-1 .tok.special")
            wait_for(
                lambda: (
                    driver.execute_script(
                        "return document.getElementById('trace-turns').dataset.drawn"
                    )
                    == "all"
                ),
                what="every turn",
            )
            assert len(driver.find_elements(By.CSS_SELECTOR, "#trace-turns .turn")) == 20
            assert driver.find_element(By.ID, "tokenizer-note").text.startswith(
                "Token text decoded for display"
            )
            token = driver.find_elements(By.CSS_SELECTOR, FIRST_TURN)[1]
            assert "logprob" in token.get_attribute("title")
            token.click()  # a tap names it: a phone shows no title
            assert "logprob" in driver.find_element(By.CSS_SELECTOR, "#turn-0 .token-inspect").text
            assert not (found := _overflow(driver)), (name, found)
            driver.save_screenshot(str(ARTIFACTS / f"report-tokens-{name}.png"))

            toggle = driver.find_element(By.CSS_SELECTOR, "#turn-0 .token-toggle")
            toggle.click()
            assert driver.execute_script(LABELS) == IDS
            assert toggle.get_attribute("aria-pressed") == "true"
            assert not (found := _overflow(driver)), (name, found)
            toggle.click()
            assert driver.execute_script(LABELS) == SHOWN
            assert js_errors(driver) == []


def test_without_a_tokenizer_the_page_says_so_and_shows_ids(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", [rollout("a1", rich_session())])
    page = write_report(out)
    with chromium() as driver:
        for name, (width, height) in WIDTHS.items():
            _open(driver, page, "a1", width, height)
            assert driver.find_element(By.ID, "tokenizer-note").text.startswith(
                "no tokenizer for test-model: showing ids; pass --tokenizer"
            )
            assert driver.execute_script(LABELS) == ["10", "11"]
            assert not driver.find_elements(By.CSS_SELECTOR, ".token-toggle")
            assert not (found := _overflow(driver)), (name, found)
            assert js_errors(driver) == []
