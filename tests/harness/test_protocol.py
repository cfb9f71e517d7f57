"""The harness protocol (``orchestrator/harness/protocol.py``): every status line and every order,
both ways, by a table; lines that are none are told apart."""

from __future__ import annotations

import pytest

from orchestrator.harness.protocol import (GO, LEAVE, Kind, Order, Status, Word, decode_order, decode_status, encode_order,
                                           encode_status, probe_answer)

STATUSES = [
    (Status(Word.READY), "ready\n"),
    (Status(Word.WINDOW), "window\n"),
    (Status(Word.RESULT), "result\n"),
    (Status(Word.FORKED, 1234), "1234 forked\n"),
    (Status(Word.WINDOW, 1234), "1234 window\n"),
    (Status(Word.RESULT, 1234), "1234 result\n"),
    (Status(Word.EXITED, 1234, 0, 812345), "1234 exited 0 812345\n"),
    (Status(Word.EXITED, 1234, -9, 0), "1234 exited -9 0\n"),  # killed by SIGKILL
    (Status(Word.EXITED, 77, 3, 1024), "77 exited 3 1024\n"),
]


@pytest.mark.parametrize(("status", "line"), STATUSES, ids=[line.strip() for _, line in STATUSES])
def test_a_status_is_written_as_its_line_and_read_back(status: Status, line: str) -> None:
    assert encode_status(status) == line
    assert decode_status(line) == status
    assert decode_status(line.strip()) == status  # the launcher strips before it reads


@pytest.mark.parametrize("line", [
    "", "\n", "hello", "READY", "ready now", "1234", "1234 ready",  # a server's pid never says ready
    "forked", "window 1234", "1234 forked 5", "1234 exited", "1234 exited 0",
    "1234 exited zero 12", "1234 exited 0 12 13", "exited 0 12", "-5 window",
])
def test_a_line_that_is_no_status_is_none(line: str) -> None:
    assert decode_status(line) is None


ORDERS = [  # order, to a fork server?, line
    (Order(Kind.RUN, config="/t/trial-3/config.json"), False, "/t/trial-3/config.json\n"),
    (GO, False, "go\n"),
    (LEAVE, False, "\n"),
    (Order(Kind.RUN, config="/t/trial-3/config.json", log="/t/trial-3/trial.log"), True,
     '{"fork": "/t/trial-3/config.json", "log": "/t/trial-3/trial.log"}\n'),
    (Order(Kind.PROBE, config="/tmp/p/request.json", log="/tmp/p/probe.log"), True,
     '{"probe": "/tmp/p/request.json", "log": "/tmp/p/probe.log"}\n'),
    (Order(Kind.GO, pid=4321), True, '{"go": 4321}\n'),
    (LEAVE, True, "\n"),
]


@pytest.mark.parametrize(("order", "server", "line"), ORDERS, ids=[f"{o.kind.value}-{'server' if s else 'serve'}" for o, s, _ in ORDERS])
def test_an_order_is_written_as_its_line_and_read_back(order: Order, server: bool, line: str) -> None:
    assert encode_order(order, server) == line
    assert decode_order(line, server) == order


@pytest.mark.parametrize("server", [False, True])
def test_eof_and_a_blank_line_mean_leave(server: bool) -> None:
    assert decode_order("", server) == LEAVE and decode_order("  \n", server) == LEAVE


@pytest.mark.parametrize(("line", "message"), [
    ('{"go": "12"}', "not an order for a fork server"),
    ('{"fork": "/c.json"}', "not an order for a fork server"),
    ('{"probe": "/r.json"}', "not an order for a fork server"),  # without its log
    ('["go", 12]', "not an order for a fork server"),
    ("go", "Expecting value"),  # a --serve order sent to a server
])
def test_a_fork_server_refuses_a_line_that_is_no_order(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_order(line, server=True)


def test_a_probes_answers_go_beside_its_request() -> None:
    assert probe_answer("/tmp/p/request.json", "probe") == "/tmp/p/request.json.probe.json"
    assert probe_answer("/tmp/p/request.json", "smoke") == "/tmp/p/request.json.smoke.json"
