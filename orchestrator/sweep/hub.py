"""Is a Hugging Face model's config within reach? ``experiments.hf``'s ``model:`` (a hub id or a
local folder), asked before anything starts, in seconds.

A trial (and the probe) loads the config with ``AutoConfig.from_pretrained``: a hub id it cannot
reach is refused only after huggingface_hub's retries (about 40 s on a machine without the
network), after torch and transformers were imported. Here one ``HEAD`` of the file the trial
would fetch (``{HF_ENDPOINT}/{id}/resolve/main/config.json``), with a short timeout, answers the
same question; a config in the local cache is enough where the hub cannot be reached (the trial
falls back to it), and where ``HF_HUB_OFFLINE`` is set the cache is all that is asked. A token
(``HF_TOKEN``, or the one ``hf auth login`` saved) goes with the request for a gated or private
model, and is never shown. Standard library only: the orchestrator imports neither
huggingface_hub nor transformers.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path

HUB_EXPERIMENTS = {"experiments.hf": "model"}
"""Experiment modules whose parameter names a Hugging Face model (hub id or folder)."""
DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
TRUE = ("1", "true", "yes", "on")


def endpoint(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(k, "").strip().lower() in TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """huggingface_hub's cache of downloaded files."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                              "huggingface")
    return Path(home).expanduser() / "hub"


def cached(repo_id: str, environ: dict[str, str] | None = None) -> bool:
    """Whether the cache holds a config.json of ``repo_id`` (any revision)."""
    snapshots = cache_dir(environ) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return any(snapshots.glob("*/config.json"))


def _token(environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if env.get(key):
            return env[key].strip()
    path = Path(env.get("HF_TOKEN_PATH") or Path(env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")) / "token").expanduser()
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def problem(model: str, timeout_s: float, environ: dict[str, str] | None = None) -> str | None:
    """Why a trial could not load ``model``'s config (a rule, one line), or None if it can."""
    path = Path(model).expanduser()
    if path.is_dir():
        return None if (path / "config.json").is_file() else \
            f"folder {path.resolve()} has no config.json (a model folder as save_pretrained writes it)"
    if model.startswith((".", "/", "~")) or not REPO_ID.fullmatch(model):
        return f"no folder {model} (nor is it a hub id such as gpt2 or openai-community/gpt2)"
    if offline(environ):
        return None if cached(model, environ) else (
            f"HF_HUB_OFFLINE is set and the cache ({cache_dir(environ)}) has no config of {model}; "
            "unset it, or give model_type instead, with the config's fields as overrides")
    if not endpoint(environ).startswith(("http://", "https://")):
        return (f"HF_ENDPOINT ({endpoint(environ)}) is not an http(s) URL, so the hub cannot be asked for "
                f"{model}; set it as https://{endpoint(environ)}, or unset it for huggingface.co")
    url = f"{endpoint(environ)}/{model}/resolve/main/config.json"
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "orchestrate"})
    if (token := _token(environ)) is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            return None  # a redirect to where the file is: it exists
        if exc.code in (401, 403, 404):
            return (f"the hub ({endpoint(environ)}) has no model {model}, or it is gated or private "
                    f"(HTTP {exc.code}); check the id, or log in (hf auth login, or HF_TOKEN){_nor_folder(path)}")
        why = f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        why = "no answer" if isinstance(reason, TimeoutError) or "timed out" in str(reason) else str(reason)
    if cached(model, environ):
        return None  # the trial falls back to the cached config
    return (f"the hub ({endpoint(environ)}) cannot be reached within {timeout_s:g} s ({why}) and the cache "
            f"has no config of {model}; connect, set HF_ENDPOINT to a mirror, or give model_type instead "
            f"(offline), with the config's fields as overrides{_nor_folder(path)}")


def _nor_folder(path: Path) -> str:
    """A hub id that could have been meant as a folder (``models/tiny``): where that was looked for."""
    return f"; nor is there a folder {path.resolve()} (a relative one is from the working directory)" \
        if "/" in str(path) else ""
