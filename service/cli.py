"""The ``trisk`` command: build and profile corpus indexes, print the OpenAPI document and settings, migrate the durable
store, serve the API."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from service.core.corpus import FilterRules, Passage, apply_filters, load_bilara, load_jsonl
from service.platform.settings import SHARED_DIR, SettingError, declared_settings, get_settings, settings_table

__all__ = ["main"]


def _filters(args: argparse.Namespace) -> FilterRules:
    return FilterRules(
        min_content_tokens=args.min_content_tokens,
        require_full_coverage=not args.allow_partial_translation,
        min_char_ratio=args.min_char_ratio,
        max_char_ratio=args.max_char_ratio,
    )


def _load(args: argparse.Namespace) -> list[Passage]:
    if args.jsonl:
        return load_jsonl(args.jsonl, default_lang=args.lang)
    translation = None if args.no_translation else args.translation_dir
    return load_bilara(args.corpus_dir, subdir=args.subdir, lang=args.lang or "pli", translation_dir=translation)


def _corpus_args(p: argparse.ArgumentParser) -> None:
    s = get_settings().index
    p.add_argument("--corpus-dir", default=s.corpus_dir, help="bilara directory (with root/ and translation/)")
    p.add_argument("--subdir", default=s.corpus_subdir, help="part of root/<lang>/ms to read (sutta, vinaya, sutta/mn)")
    p.add_argument("--translation-dir", default=s.translation_dir, help="aligned translation for the filter rules")
    p.add_argument("--no-translation", action="store_true", help="ignore translations (token filter only)")
    p.add_argument("--jsonl", help='a plain corpus instead: one {"id", "text", "lang"} per line')
    p.add_argument("--lang", default=None, help="language of the corpus (default pli; JSONL rows may say)")
    p.add_argument("--min-content-tokens", type=int, default=FilterRules.min_content_tokens)
    p.add_argument("--allow-partial-translation", action="store_true")
    p.add_argument("--min-char-ratio", type=float, default=FilterRules.min_char_ratio)
    p.add_argument("--max-char-ratio", type=float, default=FilterRules.max_char_ratio)


def cmd_profile(args: argparse.Namespace) -> int:
    passages = _load(args)
    _, profile = apply_filters(passages, _filters(args))
    print("rule (non-exclusive)          passages")
    print(profile.table())
    return 0


def cmd_build_index(args: argparse.Namespace) -> int:
    from service.core.novelty import IndexParams, build_index, corpus_hash

    t0 = time.perf_counter()
    passages = _load(args)
    t_load = time.perf_counter() - t0
    if args.expect_corpus_sha256:
        # the image is built from a pinned snapshot (Dockerfile, CORPUS_SHA256): another one fails the build
        got = corpus_hash(passages)
        if got != args.expect_corpus_sha256:
            print(
                f"trisk: the corpus read ({len(passages)} passages) has sha256 {got}, not the pinned "
                f"{args.expect_corpus_sha256}: another snapshot than the one this build pins",
                file=sys.stderr,
            )
            return 1
    params = IndexParams(filters=_filters(args), sketch_dim=args.sketch_dim, rerank=args.rerank)
    index = build_index(passages, lang=args.lang, params=params, name=args.name)
    out = index.save(args.out)
    sig = index.signature
    print(f"read {len(passages)} passages in {t_load:.1f}s")
    print(f"built index {sig['id']} ({sig['lang']}, {sig['passages']} passages, {sig['eligible_passages']} eligible)")
    print(f"corpus sha256 {sig['corpus_sha256']}, content sha256 {sig['content_sha256']}")
    print(f"build seconds: {json.dumps(sig['build_seconds'])}")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB)")
    return 0


def cmd_build_lexicon(args: argparse.Namespace) -> int:
    from service.core.critical import build_lexicon

    return build_lexicon.main(["--aligner", args.aligner, "--out", args.out])


def cmd_build_detector(args: argparse.Namespace) -> int:
    from service.core.detector import build

    argv = ["--seed", str(args.seed), "--draws", str(args.draws), "--out", args.out]
    if args.exclude_suttas:
        argv += ["--exclude-suttas", args.exclude_suttas]
    return build.main(argv)


def cmd_openapi(args: argparse.Namespace) -> int:
    from service.app.factory import openapi_document

    text = openapi_document()
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    if not args.current:
        sys.stdout.write(settings_table())
        return 0
    from service.platform.redact import is_secret_setting, redact_url, remember, scrub

    settings = get_settings()
    remember(settings)
    print("| variable | value |\n| --- | --- |")
    for path, spec in declared_settings():
        group, _, name = path.rpartition(".")
        value = getattr(getattr(settings, group), name) if group else str(SHARED_DIR)
        if is_secret_setting(spec.env):
            shown = "(set)" if value else "unset"
        elif isinstance(value, str) and "://" in value:
            shown = redact_url(value)
        else:
            shown = "unset" if value == "" else str(value)
        print(f"| `{spec.env}` | {scrub(shown)} |")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from service.state.durable import database_url, describe, make_engine, migrate
    from service.state.durable.migrate import revision, schema_state, upgrade

    if args.db_command == "revision":
        path = revision(args.message)
        ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
        if ruff:  # Alembic writes its own style
            subprocess.run([ruff, "format", "--quiet", str(path)], check=False)
        print(f"wrote {path}: check it; append-only tables need append_only.refuse_changes")
        return 0
    # with TRISK_DATABASE_URL unset: the SQLite file at TRISK_DB_PATH
    url = database_url(get_settings().durable)
    engine = make_engine(url)
    try:
        if args.db_command == "upgrade":
            before, after = upgrade(engine)
            did = "already at" if before == after else f"upgraded from {before or 'unversioned'} to"
            newer = " (newer than this release's; tolerated)" if before == after != migrate.head() else ""
            print(f"durable store ({describe(url)}): {did} revision {after}{newer}")
            return 0
        with engine.connect() as con:
            state = schema_state(con)
        if state.ahead:
            verdict = (
                "tolerated" if state.tolerated else f"refused: needs code at {state.floor or 'an unknown revision'}"
            )
            print(
                f"durable store ({describe(url)}): revision {state.at}, newer than this release's {state.head} "
                f"({verdict})"
            )
            return 0 if state.tolerated else 1
        print(f"durable store ({describe(url)}): revision {state.at or 'none'}, latest {state.head}")
        return 0 if state.at == state.head else 1
    finally:
        engine.dispose()


def cmd_keys(args: argparse.Namespace) -> int:
    """API keys in the durable store: the operator's side of /v1/keys (any tenant, no key needed)."""
    import datetime as dt
    import time

    from service.state.durable import open_store
    from service.state.durable.access import AccessStore, ensure_key_file, issue_key

    store = open_store(get_settings().durable)
    access = AccessStore(store)
    if args.keys_command == "create":
        expires = None if args.expires_days is None else time.time() + args.expires_days * 86400
        token, record = issue_key(store, args.tenant, args.name, args.scopes.split(","), expires_at=expires)
        print(f"created key {record.key_id} for tenant {record.tenant} ({','.join(record.scopes)}); shown once:")
        print(token)
        return 0
    if args.keys_command == "local-admin":
        token, created = ensure_key_file(
            store, Path(args.file), tenant=args.tenant, name="local admin (make up)", scopes=["admin"]
        )
        print(token if args.print_key else f"{'created' if created else 'kept'} the local admin key in {args.file}")
        return 0
    if args.keys_command == "revoke":
        key = access.revoke_key(args.key_id)
        print(f"revoked key {key.key_id} of tenant {key.tenant}")
        return 0

    def when(t: float | None) -> str:
        return "-" if t is None else dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")

    print(f"{'key id':14s} {'tenant':20s} {'scopes':24s} {'created':17s} {'last used':17s} {'state':8s} name")
    for k in access.keys(args.tenant):
        state = "revoked" if k.revoked_at else ("expired" if k.expires_at and k.expires_at < time.time() else "active")
        print(
            f"{k.key_id:14s} {k.tenant:20s} {','.join(k.scopes):24s} {when(k.created_at):17s} "
            f"{when(k.last_used_at):17s} {state:8s} {k.name}"
        )
    return 0


def cmd_secrets(args: argparse.Namespace) -> int:
    """Callback secrets at rest (service/platform/sealing.py): a new key for TRISK_SECRET_KEYS, or every tenant's
    current secret sealed again under the first key (after a rotation, or once a key is first set)."""
    from service.platform.sealing import Sealer, new_key_spec
    from service.state.durable import open_store
    from service.state.durable.access import AccessStore

    if args.secrets_command == "new-key":
        print(new_key_spec(args.id))
        return 0
    sealer = Sealer.from_setting(get_settings().durable.secret_keys)
    if sealer.sealing_key is None:
        print("TRISK_SECRET_KEYS is unset: callback secrets are stored plain (trisk secrets new-key makes a key)")
        return 1
    tenants = AccessStore(open_store(get_settings().durable), sealer).reseal_callback_secrets()
    print(f"sealed the current callback secret of {len(tenants)} tenant(s) under key {sealer.sealing_key}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app.server import server_options
    from service.platform.telemetry import configure_logging

    settings = get_settings()
    configure_logging(settings.api.log_format)
    # log_config=None: uvicorn's own lines go through the same structured handler; the app writes the access log
    # itself (trisk.access: route template, status, latency, request id, tenant), so uvicorn's is off
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        log_level="info",
        log_config=None,
        access_log=False,
        **server_options(settings),
    )
    return 0


def cmd_migrate_redis(args: argparse.Namespace) -> int:
    import redis

    from service.review.queue import rebuild_review_items
    from service.state.durable import open_store
    from service.state.durable.redis_import import migrate_redis
    from service.state.store import Store

    settings = get_settings()
    client = redis.Redis.from_url(args.redis_url or settings.redis.url)
    db = open_store(settings.durable)
    seen: dict[str, list[str]] = {}
    try:
        copied = migrate_redis(client, db, tenant=args.tenant, seen=seen)
    finally:
        client.close()
    # the review queue is rows of the store now: rebuilt from the copied results, with the verdicts already given
    store = Store(None, retention_seconds=settings.redis.retention_seconds, db=db)
    for tenant, aids in seen.items():
        added = asyncio.run(rebuild_review_items(db, store, tenant, aids, retention_seconds=store.ttl or 0))
        if added:
            copied["review items"] += added
    for kind, n in sorted(copied.items()):
        print(f"{kind}: {n}")
    if not copied:
        print("nothing to copy: the store holds every record Redis has")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except SettingError as exc:  # a bad environment variable: say which, without a traceback
        print(f"trisk: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="trisk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("profile", help="how many passages each filter rule removes")
    _corpus_args(p)
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("build-index", help="build a novelty index artifact from a corpus")
    _corpus_args(p)
    p.add_argument("--out", default=get_settings().index.path)
    p.add_argument("--name", default="pli-sutta")
    p.add_argument("--sketch-dim", type=int, default=256)
    p.add_argument("--rerank", type=int, default=16)
    p.add_argument("--expect-corpus-sha256", help="refuse to build unless the corpus read has this sha256")
    p.set_defaults(func=cmd_build_index)

    p = sub.add_parser("build-lexicon", help="build the Pali-English translation lexicon from the aligned corpus")
    p.add_argument("--aligner", choices=("eflomal", "ibm1"), default="eflomal")
    p.add_argument("--out", default=str(get_settings().risk.lexicon_dir / "pli-en.json.gz"))
    p.set_defaults(func=cmd_build_lexicon)

    p = sub.add_parser("build-detector", help="build the word-level error detector from synthetic corpus errors")
    p.add_argument("--exclude-suttas", help="file of sutta ids to leave out (one a line), beside PaliBench dev")
    p.add_argument("--seed", type=int, default=20261205)
    p.add_argument("--draws", type=int, default=3, help="corrupted copies per corpus chunk")
    p.add_argument("--out", default="models/detector/pli-en.json")
    p.set_defaults(func=cmd_build_detector)

    p = sub.add_parser("openapi", help="print (or write) the OpenAPI document")
    p.add_argument("--out")
    p.set_defaults(func=cmd_openapi)

    p = sub.add_parser("settings", help="print the configuration table (every environment variable, its default)")
    p.add_argument("--current", action="store_true", help="this process's values instead, credentials masked")
    p.set_defaults(func=cmd_settings)

    p = sub.add_parser("db", help="the durable store's schema: upgrade it, show its revision, write a migration")
    db = p.add_subparsers(dest="db_command", required=True)
    db.add_parser("upgrade", help="migrate to the latest revision (idempotent; safe when several processes run it)")
    db.add_parser("current", help="print the database's revision (exit 1 when it is not the latest)")
    rev = db.add_parser("revision", help="write the next migration from the difference of schema.py and the latest")
    rev.add_argument("-m", "--message", required=True)
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("keys", help="API keys: create, list, revoke (the operator's side; no key needed)")
    keys = p.add_subparsers(dest="keys_command", required=True)
    k = keys.add_parser("create", help="create a key (printed once)")
    k.add_argument("--tenant", required=True)
    k.add_argument("--name", required=True)
    k.add_argument("--scopes", required=True, help="comma-separated: read, submit, review, admin")
    k.add_argument("--expires-days", type=float)
    k = keys.add_parser("list", help="keys, never their secrets")
    k.add_argument("--tenant", help="only this tenant's")
    k = keys.add_parser("revoke", help="revoke a key by its id")
    k.add_argument("key_id")
    k = keys.add_parser("local-admin", help="make sure FILE holds a valid admin key (make up uses it)")
    k.add_argument("--file", default="var/admin-key")
    k.add_argument("--tenant", default="local")
    k.add_argument("--print-key", action="store_true", help="print the key itself")
    p.set_defaults(func=cmd_keys)

    p = sub.add_parser("secrets", help="callback secrets at rest: a new sealing key, or reseal under the first key")
    sec = p.add_subparsers(dest="secrets_command", required=True)
    k = sec.add_parser("new-key", help="print a new id:base64 entry for TRISK_SECRET_KEYS")
    k.add_argument("--id", help="the key's id (default: a random one)")
    sec.add_parser("reseal", help="append each tenant's current secret sealed under the first key (after a rotation)")
    p.set_defaults(func=cmd_secrets)

    p = sub.add_parser(
        "migrate-redis",
        help="copy the records an earlier release kept in Redis into the durable store (idempotent, resumable)",
    )
    p.add_argument("--redis-url", default=None, help="the deployment's Redis (default: REDIS_URL)")
    p.add_argument("--tenant", default="*", help="copy one tenant's records only (default: every tenant)")
    p.set_defaults(func=cmd_migrate_redis)

    p = sub.add_parser("serve", help="run the API with uvicorn")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
