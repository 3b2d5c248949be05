"""Loom's boto3 clients: one session whose loader lists only Loom's services, and nothing else different."""

from __future__ import annotations

import os

import boto3
import botocore.handlers
import botocore.loaders
import pytest
from botocore.loaders import Loader

from engine_core.adapters import clients
from engine_core.adapters.bootstrap import client_config, from_environment
from engine_core.settings import EngineSettings
from loom_test_support.moto_session import fake_credentials

pytestmark = pytest.mark.usefixtures("aws_env")


@pytest.fixture
def aws_env(monkeypatch):
    fake_credentials(monkeypatch)
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)


@pytest.mark.parametrize("type_name", ["service-2", "endpoint-rule-set-1"])
def test_the_loader_lists_what_botocore_lists_of_loom_services(type_name):
    # given / when
    everything = Loader().list_available_services(type_name)
    narrow = clients.ServicesLoader(clients.SERVICES).list_available_services(type_name)
    # then: the same answer for Loom's services, out of the hundreds botocore ships
    assert narrow == [name for name in clients.SERVICES if name in everything] == list(clients.SERVICES)
    assert len(everything) > 100
    # a service botocore lacks is left out, as botocore leaves it out
    assert clients.ServicesLoader(("dynamodb", "no-such-service")).list_available_services(type_name) == ["dynamodb"]


def test_making_a_client_skips_the_scan_of_every_service_folder(monkeypatch):
    # given: botocore's folder listings counted
    listed: list[str] = []
    real_listdir = os.listdir

    def counting_listdir(path):
        listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(botocore.loaders.os, "listdir", counting_listdir)
    # when: the same two clients through boto3's own session and through Loom's
    plain = boto3.session.Session()
    for name in ("dynamodb", "sqs"):
        plain.client(name)
    by_boto3, listed[:] = len(listed), []
    loom = clients.new_session()
    for name in ("dynamodb", "sqs"):
        loom.client(name)
    # then: boto3's lists every service's folder; Loom's only its own services'
    assert by_boto3 > 200
    assert 0 < len(listed) <= 12, listed


def test_clients_reach_the_same_aws_as_boto3s(monkeypatch):
    from loom_test_support.moto_session import mock_aws

    with mock_aws():
        # given: a queue made through boto3's default session
        url = boto3.client("sqs").create_queue(QueueName="loom-clients")["QueueUrl"]
        # when / then: Loom's client sees it (moto's stubber is in Loom's session too: nothing left the process)
        assert clients.client("sqs").get_queue_url(QueueName="loom-clients")["QueueUrl"] == url
        assert clients.client("dynamodb").list_tables()["TableNames"] == []
        assert clients.client("events").list_event_buses()["EventBuses"]


def test_a_client_for_another_service_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match=r"'s3' is not a service Loom's clients are made for \(dynamodb, sqs, "
                                         r"events\); add it to engine_core.adapters.clients.SERVICES"):
        clients.client("s3")


def test_the_session_is_shared_and_made_again_when_boto3s_default_or_botocores_handlers_change(monkeypatch):
    # given
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", boto3.session.Session())
    first = clients.session()
    # when / then: shared while nothing changes
    assert clients.session() is first
    # a new default session (moto makes one as each mock starts): a new one
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", boto3.session.Session())
    second = clients.session()
    assert second is not first and clients.session() is second
    # a built-in handler added (moto adds its stubber on import): a new one, with the handler in it
    seen: list[str] = []

    def marker(**_):
        seen.append("called")

    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [*botocore.handlers.BUILTIN_HANDLERS, ("loom-test", marker)])
    third = clients.session()
    assert third is not second
    third._session.get_component("event_emitter").emit("loom-test")
    assert seen == ["called"]


def test_aws_data_path_is_searched_first(monkeypatch, tmp_path):
    # given / when
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    loader = clients.new_session()._session.get_component("data_loader")
    # then: as botocore's own loader searches it
    assert isinstance(loader, clients.ServicesLoader) and loader.search_paths[0] == str(tmp_path)


def test_every_client_the_bootstrap_makes_is_one_of_loom_services(monkeypatch):
    # given: the client calls counted
    made: list[str] = []
    real = clients.client

    def counting(service, config=None):
        made.append(service)
        return real(service, config)

    monkeypatch.setattr(clients, "client", counting)
    env = {"LOOM_TABLE_NAME": "t", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
           "LOOM_EVENT_BUS_NAME": "bus"}
    # when
    runtime = from_environment(env, load_workflows=False, parts=())
    # then: the store's, the queue's and the events' clients, each through Loom's session and its config
    assert sorted(made) == ["dynamodb", "events", "sqs"]
    assert runtime.queue.client.meta.config.read_timeout == client_config(EngineSettings.from_env(env)).read_timeout


def test_a_replaced_boto3_client_makes_the_clients_as_it_would_for_boto3s_callers(monkeypatch):
    from unittest import mock

    # given: boto3.client patched, as a test double does
    double = mock.MagicMock(name="boto3.client")
    with mock.patch("boto3.client", double):
        env = {"LOOM_TABLE_NAME": "t", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q"}
        # when
        runtime = from_environment(env, load_workflows=False, parts=())
        # then: the store's and the queue's clients are the double's, made with the handler's config
        assert [c.args[0] for c in double.call_args_list] == ["dynamodb", "sqs"]
        assert runtime.store.client is double.return_value and runtime.queue.client is double.return_value
        assert double.call_args_list[0].kwargs["config"].read_timeout == client_config(EngineSettings()).read_timeout
        # a service Loom makes no client for is still refused
        with pytest.raises(ValueError, match="'s3' is not a service"):
            clients.client("s3")
    # and with boto3's own function back, Loom's session again
    assert type(clients.client("sqs")._loader) is clients.ServicesLoader
