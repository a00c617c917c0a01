"""Failed logins are rate-limited per user name and per address (django-axes, counted in
the database: the same with or without Redis)."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def attempt(username: str, password: str, address: str = "203.0.113.7"):
    return Client(REMOTE_ADDR=address).post("/accounts/login/", {"username": username, "password": password})


@override_settings(AXES_FAILURE_LIMIT=3)
def test_it_locks_a_user_name_after_repeated_failures_even_from_new_addresses(owner):
    for n in range(2):
        assert attempt(owner.username, "wrong", f"198.51.100.{n}").status_code == 200  # the form again
    assert attempt(owner.username, "wrong", "198.51.100.2").status_code == 429  # the third failure locks
    locked = attempt(owner.username, "password-alice", "198.51.100.99")
    assert locked.status_code == 429


@override_settings(AXES_FAILURE_LIMIT=3)
def test_it_locks_an_address_that_tries_many_user_names(owner, member):
    for n in range(2):
        assert attempt(f"nobody-{n}", "wrong").status_code == 200
    assert attempt("nobody-2", "wrong").status_code == 429
    assert attempt(member.username, "password-bob").status_code == 429
    # Another address and the right password still get in.
    ok = attempt(owner.username, "password-alice", "192.0.2.1")
    assert ok.status_code == 302


def test_a_successful_login_resets_the_count(owner):
    for _ in range(2):
        attempt(owner.username, "wrong")
    assert attempt(owner.username, "password-alice").status_code == 302
    for _ in range(4):
        assert attempt(owner.username, "wrong").status_code == 200
