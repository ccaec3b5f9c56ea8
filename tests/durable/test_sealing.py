"""Callback secrets at rest: sealed with AES-GCM (they must be recoverable to sign), older plaintext rows still read,
a row does not open for another tenant, and a key rotation keeps every tenant's secret (on both engines)."""

from __future__ import annotations

import time
import uuid

import pytest
import sqlalchemy as sa

from service.platform.sealing import Sealer, SealError, new_key_spec
from service.state.durable import DurableStore
from service.state.durable.access import AccessStore
from service.state.durable.schema import callback_secrets

K1, K2 = new_key_spec("k1"), new_key_spec("k2")


def _rows(store: DurableStore, tenant: str) -> list[str]:
    c = callback_secrets.c
    with store._read() as con:
        return [str(r) for r in con.execute(sa.select(c.secret).where(c.tenant == tenant).order_by(c.id)).scalars()]


def _tenant() -> str:
    return f"test-seal-{uuid.uuid4().hex[:10]}"


def test_a_secret_is_sealed_at_rest_and_opens_to_sign(durable_store: DurableStore) -> None:
    tenant = _tenant()
    access = AccessStore(durable_store, Sealer.from_setting(K1))
    secret = access.callback_secret(tenant)  # created on first use
    (stored,) = _rows(durable_store, tenant)
    assert stored.startswith("v1:k1:") and secret.decode() not in stored  # the finding: it was stored plain
    assert access.callback_secret(tenant) == secret
    with pytest.raises(SealError, match="k1"):
        AccessStore(durable_store, Sealer()).callback_secret(tenant)  # without the key it cannot be read


def test_old_plaintext_rows_still_read_and_reseal_under_the_first_key(durable_store: DurableStore) -> None:
    tenant = _tenant()
    with durable_store._insert() as con:  # what an older release wrote
        con.execute(callback_secrets.insert().values(tenant=tenant, secret="plain-old-secret", created_at=time.time()))
    old = AccessStore(durable_store, Sealer.from_setting(K1))
    assert old.callback_secret(tenant) == b"plain-old-secret"
    assert tenant in old.reseal_callback_secrets()
    assert _rows(durable_store, tenant)[-1].startswith("v1:k1:")
    # rotation: the new key first, the old one kept to read; reseal; then the old key can go
    rotated = AccessStore(durable_store, Sealer.from_setting(f"{K2},{K1}"))
    assert rotated.callback_secret(tenant) == b"plain-old-secret"
    assert tenant in rotated.reseal_callback_secrets() and tenant not in rotated.reseal_callback_secrets()
    assert AccessStore(durable_store, Sealer.from_setting(K2)).callback_secret(tenant) == b"plain-old-secret"


def test_a_sealed_row_does_not_open_for_another_tenant(durable_store: DurableStore) -> None:
    a, b = _tenant(), _tenant()
    sealer = Sealer.from_setting(K1)
    secret = AccessStore(durable_store, sealer).callback_secret(a)
    (stored,) = _rows(durable_store, a)
    with durable_store._insert() as con:  # a row copied over to another tenant
        con.execute(callback_secrets.insert().values(tenant=b, secret=stored, created_at=time.time()))
    with pytest.raises(SealError, match="does not open"):
        AccessStore(durable_store, sealer).callback_secret(b)
    assert AccessStore(durable_store, sealer).callback_secret(a) == secret  # its own tenant's still opens


@pytest.mark.parametrize(
    ("raw", "needle"),
    [("k1", "id:base64"), ("k1:!!", "not base64"), ("k1:AAAA", "not 32"), (f"{K1},{K1}", "twice")],
    # ids without the random key: every xdist worker must collect the same test names
    ids=["no-colon", "not-base64", "not-32-bytes", "twice"],
)
def test_a_bad_key_setting_is_refused_naming_the_key_not_its_value(raw: str, needle: str) -> None:
    with pytest.raises(SealError, match=needle) as info:
        Sealer.from_setting(raw)
    assert K1.split(":")[1] not in str(info.value)
