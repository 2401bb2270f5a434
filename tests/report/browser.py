"""Headless Debian Chromium driven by Selenium, for the report's browser tests and its
benchmark: the page as a person's browser runs it, JavaScript errors collected."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def chromium(
    width: int = 1400, height: int = 1000, *, phone: bool = False
) -> Iterator[webdriver.Chrome]:
    """Headless Chromium with a window of `width` x `height`; `phone`: a phone's screen of
    that size, by device emulation (a headless window is never narrower than 500 px, so
    a 390 px phone can only be emulated)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    # Console messages and uncaught errors, read back with get_log("browser").
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(300)
    if phone:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True},
        )
    try:
        yield driver
    finally:
        driver.quit()


def overflow(driver: webdriver.Chrome) -> int:
    """How far the page scrolls sideways, in CSS px (0 or less: it does not)."""
    return int(
        driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    )


def js_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(condition: Callable[[], Any], timeout_s: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.1)
