from harbor_ray.capture.core.session_keys import extract_key, mint_key, session_of


def test_minted_keys_name_their_session_and_are_unguessable() -> None:
    keys = {mint_key("abc") for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        assert session_of(key) == "abc"
        secret = key.removeprefix("hr-abc-")
        assert len(secret) * 6 >= 128  # urlsafe base64: 6 bits a character


def test_session_of_rejects_foreign_keys() -> None:
    assert session_of("sk-123") is None
    assert session_of("hr-abc") is None
    assert session_of("hr--secret") is None


def test_extract_key_from_each_sdk_location() -> None:
    assert extract_key({"authorization": "Bearer k1"}, {}) == "k1"
    assert extract_key({"x-api-key": "k2"}, {}) == "k2"
    assert extract_key({"x-goog-api-key": "k3"}, {}) == "k3"
    assert extract_key({}, {"key": "k4"}) == "k4"
    assert extract_key({}, {}) is None
