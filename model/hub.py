"""A public model's files fetched by its hub id (`transformer import facebook/nllb-200-distilled-600M OUT`): the
user's explicit command, for a machine that is online. huggingface_hub downloads what an import reads (never
pickled weights) into its cache, with progress bars, and later runs find them there, offline too."""

from __future__ import annotations

import re
from pathlib import Path

from model.errors import HubError
from model.hf_weights import INDEX_FILE

# What the importers read: configs, safetensors weights, tokenizer files. Pickled weights are never fetched.
FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",  # a sharded checkpoint's index, and its shards (save_pretrained's names)
    "model-*-of-*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "target_vocab.json",
    "merges.txt",
    "*.model",
    "*.spm",
]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def is_hub_id(src: str) -> bool:
    """Whether src names a hub model rather than a directory here (a directory that exists always wins)."""
    return not Path(src).exists() and HUB_ID.match(src) is not None and not src.startswith((".", "/"))


def fetch(repo_id: str, revision: str | None = None) -> Path:
    """The directory of repo_id's files in the local hub cache, downloaded first where missing; HubError, one line,
    for a machine that is offline without them, a missing or private model, a gated one, or no safetensors."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        path = Path(snapshot_download(repo_id, revision=revision, allow_patterns=FILES))
    except GatedRepoError:
        raise HubError(repo_id, "a gated model: accept its terms on the hub, then log in (HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise HubError(repo_id, "no such model on the hub, or a private one (log in with HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise HubError(repo_id, f"no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        raise HubError(
            repo_id,
            "not in the local hub cache, and the hub cannot be reached (offline, or HF_HUB_OFFLINE=1): fetch it "
            "on a machine that is online, or give a directory",
        ) from None
    except (HfHubHTTPError, OSError) as e:
        raise HubError(repo_id, f"download failed ({str(e).splitlines()[0][:200]})") from None
    if not (path / "config.json").is_file():
        raise HubError(repo_id, "has no config.json: not a transformers model")
    if not (path / "model.safetensors").is_file() and not (path / INDEX_FILE).is_file():
        raise HubError(
            repo_id,
            f"has no model.safetensors nor {INDEX_FILE} (pickled weights are not read): save it with safetensors",
        )
    return path
