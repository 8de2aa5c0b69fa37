"""The loopback registry fixture itself: the engine pushes to and pulls from
127.0.0.1:PORT over plain http (127.0.0.0/8 is an insecure registry by default), a pull
gives back the very image id that was pushed, a missing tag is the registry's
"manifest unknown" (404: docker.errors.NotFound), and a stopped registry is a connection
error (500 from the engine: docker.errors.APIError, "connection refused").
"""

from __future__ import annotations

import docker.errors
import pytest
from registry_support import TOKEN_LABEL, push_unique_image, remove_local


def test_push_then_pull_gives_the_pushed_image(client, registry, source_image) -> None:
    pushed = push_unique_image(client, registry, source_image, "smoke/base", fresh_layer=256 << 10)
    assert pushed.startswith(f"127.0.0.1:{registry.port}/smoke/base:")
    repo, tag = pushed.split("/", 1)[1].rsplit(":", 1)
    assert tag in registry.tags(repo)
    assert registry.digest(repo, tag) == pushed.digest
    # removed locally: neither the reference nor the image id is left
    for ref in (pushed, pushed.image_id):
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(ref)
    try:
        image = client.images.pull(pushed)
        assert image.id == pushed.image_id
        assert pushed in image.tags
        assert f"{registry.host}/{repo}@{pushed.digest}" in image.attrs["RepoDigests"]
        assert image.labels.get(TOKEN_LABEL)
    finally:
        remove_local(client, pushed, pushed.image_id)


def test_pull_of_a_missing_tag_is_manifest_unknown(client, registry, source_image) -> None:
    pushed = push_unique_image(client, registry, source_image, "smoke/missing")
    absent = pushed.rsplit(":", 1)[0] + ":no-such-tag"
    with pytest.raises(docker.errors.NotFound, match="manifest unknown"):
        client.images.pull(absent)
    with pytest.raises(docker.errors.NotFound, match="manifest unknown"):
        client.images.pull(f"{registry.host}/smoke/no-such-repo", tag="latest")
    assert registry.tags("smoke/no-such-repo") == []


def test_pull_from_a_stopped_registry_is_a_connection_error(client, own_registry) -> None:
    # a fresh registry holds nothing: a one-layer image FROM scratch keeps the push instant
    pushed = push_unique_image(client, own_registry, "scratch", "smoke/stopped", fresh_layer=4096)
    pid = own_registry.pid
    own_registry.stop()
    assert not own_registry.running and own_registry.pid is None and pid
    with pytest.raises(docker.errors.APIError, match="connection refused") as info:
        client.images.pull(pushed)
    assert not isinstance(info.value, docker.errors.NotFound)
    assert info.value.response.status_code == 500
    # back on the same port, with the same storage: the image is there again
    own_registry.start()
    try:
        assert client.images.pull(pushed).id == pushed.image_id
    finally:
        remove_local(client, pushed, pushed.image_id)
