"""A user name in front of a masked password is masked too unless it is a plain name: in a mangled URL
(`http:[//TOKEN:TOKEN@host`, found by tests/unit/test_cli_fuzz.py) the token also stood as the user."""

from torchkiln.redact import redact


def test_a_token_shaped_user_before_a_password_is_masked_in_a_mangled_url() -> None:
    assert redact("(http:[//PLANTEDs3cr3t:PLANTEDs3cr3t@127.0.0.1:3141/simple/)") == (
        "(http:[//***:***@127.0.0.1:3141/simple/)"
    )
    assert redact("alice:hunter2@host") == "alice:***@host"  # a plain user name stays
    assert redact("python:3.11@sha256:abc") == "python:3.11@sha256:abc"  # a digest is no credential
