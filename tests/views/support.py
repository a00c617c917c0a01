"""Shared fixtures for the dashboard tests (tests/views/ and tests/browser/).

``demo_world`` loads the demo once per test module, through the real ingest path and the
real analysis, into a project of its own, beside another project that holds a "canary"
run no page of the demo project may show. It is committed outside the per-test
transactions (so a live server thread sees it too) and deleted when the module ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from uuid import uuid4

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from manifests import ingest, services
from manifests.demo import runs as demo
from manifests.models import Membership, Project
from tests.conftest import make_manifest

CANARY = "canary-of-the-other-project"


@dataclass
class World:
    project: Project
    other: Project
    owner: object
    member: object
    outsider: object
    key: str
    password: str = "pw-for-tests-only"

    def client(self, user) -> Client:
        c = Client()
        c.force_login(user)
        return c


def _load(unique: str) -> World:
    # Committed outside any test transaction: make sure it is the test database. (pytest-django
    # only sets one up when a collected test is marked django_db; every module using this is.)
    name = str(connection.settings_dict["NAME"])
    assert "test" in name.rsplit("/", 1)[-1], f"refusing to load the demo into {name}: not a test database"
    User = get_user_model()
    password = "pw-for-tests-only"
    owner = User.objects.create_user(f"owner-{unique}", password=password)
    member = User.objects.create_user(f"member-{unique}", password=password)
    outsider = User.objects.create_user(f"outsider-{unique}", password=password)
    project = services.create_project(name=f"Demo {unique}", owner=owner)
    services.add_member(project=project, user=member, role=Membership.MEMBER)
    other = services.create_project(name=f"Other {unique}", owner=outsider)
    report = demo.load(project=project)
    assert report["accepted"] == report["calls"], report
    canary = make_manifest(f"{CANARY}/step-0", run_id=CANARY, agent=f"{CANARY}-agent", model=f"{CANARY}-model")
    canary["items"][0]["reason"] = CANARY
    result = ingest.ingest_body(project=other, body=json.dumps(canary).encode())
    assert result.count(ingest.ACCEPTED) == 1
    _, key = services.create_api_key(project=project, can_ingest=True, can_read=True)
    return World(project=project, other=other, owner=owner, member=member, outsider=outsider, key=key)


def _delete(world: World) -> None:
    Project.objects.filter(pk__in=[world.project.pk, world.other.pk]).delete()
    get_user_model().objects.filter(pk__in=[world.owner.pk, world.member.pk, world.outsider.pk]).delete()


@pytest.fixture(scope="module", name="demo_world")
def demo_world_fixture(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        world = _load(uuid4().hex[:8])
    try:
        yield world
    finally:
        with django_db_blocker.unblock():
            _delete(world)
