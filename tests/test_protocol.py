"""The harness protocol (``orchestrator/protocol.py``): every status line and every order,
both ways, by a table; lines that are none are told apart."""

from __future__ import annotations

import pytest

from orchestrator.protocol import (GO, LEAVE, Kind, Order, StatusLine, Word, decode_order, decode_status, encode_order,
                                           encode_status, probe_answer)

STATUSES = [
    (StatusLine(Word.READY), "ready\n"),
    (StatusLine(Word.WINDOW), "window\n"),
    (StatusLine(Word.MEASURED), "measured\n"),
    (StatusLine(Word.RESULT), "result\n"),
    (StatusLine(Word.FORKED, 1234), "1234 forked\n"),
    (StatusLine(Word.READY, 1234), "1234 ready\n"),  # a prepared process: its device is initialised
    (StatusLine(Word.WINDOW, 1234), "1234 window\n"),
    (StatusLine(Word.MEASURED, 1234), "1234 measured\n"),
    (StatusLine(Word.RESULT, 1234), "1234 result\n"),
    (StatusLine(Word.EXITED, 1234, 0, 812345), "1234 exited 0 812345\n"),
    (StatusLine(Word.EXITED, 1234, -9, 0), "1234 exited -9 0\n"),  # killed by SIGKILL
    (StatusLine(Word.EXITED, 77, 3, 1024), "77 exited 3 1024\n"),
]


@pytest.mark.parametrize(("status", "line"), STATUSES, ids=[line.strip() for _, line in STATUSES])
def test_a_status_is_written_as_its_line_and_read_back(status: StatusLine, line: str) -> None:
    assert encode_status(status) == line
    assert decode_status(line) == status
    assert decode_status(line.strip()) == status  # the launcher strips before it reads


@pytest.mark.parametrize("line", [
    "", "\n", "hello", "READY", "ready now", "1234", "1234 ready 5",
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
    # a trial prepared ahead: forked for its device, then given its configuration and its log
    (Order(Kind.PREPARE, device="cuda"), True, '{"prepare": "cuda"}\n'),
    # forked beside its slot's trial on a host of several GPUs: only the driver, no context
    (Order(Kind.PREPARE, device="cuda", context=False), True, '{"prepare": "cuda", "context": false}\n'),
    (Order(Kind.PREPARE, pid=4321), True, '{"context": 4321}\n'),  # its context, once no window runs
    (Order(Kind.PREPARE), False, '{"context": true}\n'),  # passed on to it
    (Order(Kind.RUN, config="/t/trial-4/config.json", log="/t/trial-4/trial.log", pid=4321), True,
     '{"give": 4321, "config": "/t/trial-4/config.json", "log": "/t/trial-4/trial.log"}\n'),
    (Order(Kind.RUN, config="/t/trial-4/config.json", log="/t/trial-4/trial.log"), False,
     '{"run": "/t/trial-4/config.json", "log": "/t/trial-4/trial.log"}\n'),
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
    ('{"give": 12, "config": "/c.json"}', "not an order for a fork server"),  # without its log
    ('{"prepare": null}', "not an order for a fork server"),
    ('{"context": true}', "not an order for a fork server"),  # the prepared process's line, not the server's
    ('["go", 12]', "not an order for a fork server"),
    ("go", "Expecting value"),  # a --serve order sent to a server
])
def test_a_fork_server_refuses_a_line_that_is_no_order(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_order(line, server=True)


def test_a_probes_answers_go_beside_its_request() -> None:
    assert probe_answer("/tmp/p/request.json", "probe") == "/tmp/p/request.json.probe.json"
    assert probe_answer("/tmp/p/request.json", "smoke") == "/tmp/p/request.json.smoke.json"


# -- the trial's two files: the same bytes as the dicts the two sides wrote before they were typed ----

STEPS = {"warmup_steps": 2, "measure_steps": 5, "min_measure_s": 0.5}
SWEEP_CONFIG = {"experiment": "experiments.mlp", "trial_number": 7, "params": {"device": "cpu", "batch_size": 8},
                "not_applied": {"compile": "cpu: no"}, "allow_swap": False, "trial": STEPS}
DOCTOR_CONFIG = {"experiment": "experiments.mlp", "params": {"device": "cpu", "batch_size": 8}, "not_applied": {},
                 "allow_swap": True, "trial": STEPS}


@pytest.mark.parametrize("old", [SWEEP_CONFIG, DOCTOR_CONFIG], ids=["sweep", "doctor-check"])
def test_a_config_is_written_as_the_launcher_wrote_it_and_read_back(old: dict) -> None:
    import dataclasses
    import json

    from orchestrator.protocol import config_of, decode_config, encode_config

    config = dataclasses.replace(config_of(old), result_path="/t/result.json")
    text = encode_config(config)
    assert text == json.dumps({**old, "result_path": "/t/result.json"}, indent=1, default=str)
    assert decode_config(text) == config
    assert config.trial.min_measure_s == 0.5 and config.watch_parent


def test_a_config_names_the_study_s_compile_cache_where_it_has_one() -> None:
    import json

    from orchestrator.protocol import config_of, decode_config, encode_config

    config = config_of({**SWEEP_CONFIG, "compile_cache": "/s/.inductor"})
    assert json.loads(encode_config(config))["compile_cache"] == "/s/.inductor"
    assert decode_config(encode_config(config)) == config
    assert "compile_cache" not in json.loads(encode_config(config_of(SWEEP_CONFIG)))


def test_a_cold_config_that_does_not_watch_its_parent_says_so() -> None:
    import json

    from orchestrator.protocol import config_of, decode_config, encode_config

    config = config_of({**DOCTOR_CONFIG, "result_path": "r", "watch_parent": False})
    assert json.loads(encode_config(config))["watch_parent"] is False
    assert decode_config(encode_config(config)) == config


MEASURED = {"status": "swapped", "metrics": {"samples_per_s": 10.0}, "applied": {"device": "cpu"},
            "not_applied": {}, "info": {}, "detail": "fits but swaps",
            "provenance": {"device": "cpu"}, "placement": {"cpu_cores": 2}, "process_peak_rss_gib": 0.5,
            "timeline": {"main": 1.0}}
FAILED = {"status": "oom", "detail": "RuntimeError: out of memory", "phase": "warmup", "step": 0,
          "memory_at_failure": {"rss_gib": 1.0}, "provenance": {"error": "x"}, "placement": {},
          "process_peak_rss_gib": 1.0, "timeline": {}}
ERROR = {"status": "error", "detail": "ValueError: bad", "phase": "build", "step": 0, "provenance": {},
         "placement": {}, "process_peak_rss_gib": None, "timeline": {}}
OK = {k: v for k, v in MEASURED.items() if k != "detail"} | {"status": "ok"}


@pytest.mark.parametrize("old", [MEASURED, OK, FAILED, ERROR], ids=["swapped", "ok", "oom", "error"])
def test_a_result_is_written_as_the_trial_wrote_it_and_read_back(old: dict) -> None:
    import json

    from orchestrator.protocol import decode_result, encode_result

    result = decode_result(json.dumps(old))
    assert encode_result(result) == json.dumps(old, indent=1, default=str)
    assert result.measured == ("metrics" in old)


@pytest.mark.parametrize("text", ["[]", '{"metrics": {}}', '{"status": 3}', "not json"])
def test_text_that_is_no_result_is_refused(text: str) -> None:
    from orchestrator.protocol import decode_result

    with pytest.raises(ValueError):
        decode_result(text)


def test_a_window_s_precision_travels_in_the_config_only_where_the_spec_sets_one() -> None:
    import dataclasses

    from orchestrator.protocol import TrialSteps, config_of, decode_config, encode_config

    config = dataclasses.replace(config_of(SWEEP_CONFIG), trial=TrialSteps(2, 10, 0.5, 0.005))
    text = encode_config(config)
    assert '"precision": 0.005' in text and decode_config(text).trial.precision == 0.005
    assert "precision" not in encode_config(config_of(SWEEP_CONFIG))
