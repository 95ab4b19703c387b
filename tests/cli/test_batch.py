"""``qwen-ui batch`` on the shipped demo model: 50 rows, 3 of them bad (a missing file, a
corrupt image, an empty question), interrupted and resumed, through the local engine and
against a real server process with an API token; and rows whose images are ``oss://``
objects, read from our signature-verifying OSS server with the batch's own keys."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.tenants import Limits, OSSConfig, Tenant
from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.cli import main
from qwen_ui.demo import scenes
from qwen_ui.demo.evaluate import normalize
from qwen_ui.settings import Settings
from tests.support.auth import add_tenants, local_tenant
from tests.support.oss_server import FakeOSS
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.slow]

ROWS = 50
BAD = {5: "image_missing", 17: "image_unsupported", 33: "no_question"}  # row number: code
REGION, BUCKET, PREFIX = "cn-test", "shop-images", "shop/"
SHOP_KEY = ("LTAIshopReader000001", "shop-secret-0001-abcdefghijklmn")  # id, secret
OSS_ROWS = 4  # good rows asked twice: images from files, then the same from OSS


@dataclass(frozen=True)
class Dataset:
    folder: Path
    rows: list[dict[str, object]]  # id, images (relative paths), question, expect

    def write_csv(self, path: Path) -> Path:
        """Without ids: they default to the row numbers."""
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["images", "question"])
            for row in self.rows:
                writer.writerow(["|".join(row["images"]), row["question"]])  # type: ignore[arg-type]
        return path

    def write_jsonl(self, path: Path) -> Path:
        with path.open("w") as file:
            for row in self.rows:
                record = {k: row[k] for k in ("id", "images", "question")}
                file.write(json.dumps(record, ensure_ascii=False) + "\n")
        return path


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    folder = tmp_path_factory.mktemp("batch")
    (folder / "img").mkdir()
    (folder / "img" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    samples = iter(scenes.held_out(ROWS - len(BAD), seed=0))
    rows: list[dict[str, object]] = []
    for number in range(1, ROWS + 1):
        row: dict[str, object] = {"id": f"q{number:02d}", "question": "What is this?"}
        if number in BAD:
            code = BAD[number]
            where = {"image_missing": "img/nope.png", "image_unsupported": "img/corrupt.png"}
            row["images"] = [where.get(code, "img/corrupt.png")]
            row["question"] = "   " if code == "no_question" else "What is this?"
            if code == "no_question":
                row["images"] = [str(rows[0]["images"][0])]  # type: ignore[index]
        else:
            sample = next(samples)
            paths = []
            for i, picture in enumerate(sample.images()):
                paths.append(f"img/{number}_{i}.png")
                picture.save(folder / paths[-1])
            row.update(images=paths, question=sample.question, expect=sample.answer)
        rows.append(row)
    return Dataset(folder, rows)


def records(path: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a torn line from the killed run
            continue
    return out


def check_complete(path: Path, dataset: Dataset, ids: list[str]) -> None:
    """Every row exactly once, the bad ones with their typed error, the others answered
    and (nearly all: the demo model is ~98 % right) correctly."""
    found = records(path)
    assert sorted(str(r["id"]) for r in found) == sorted(ids)
    by_id = {str(r["id"]): r for r in found}
    right = 0
    for number, (row, row_id) in enumerate(zip(dataset.rows, ids, strict=True), start=1):
        record = by_id[row_id]
        assert record["row"] == number
        if number in BAD:
            assert record["answer"] is None
            assert record["error"]["code"] == BAD[number]  # type: ignore[index]
            continue
        assert record["error"] is None, record
        assert isinstance(record["answer"], str) and record["timings"]["row"] > 0  # type: ignore[index]
        right += normalize(str(record["answer"])) == normalize(str(row["expect"]))
    assert right >= 0.9 * (ROWS - len(BAD))


def test_local_engine_limit_then_resume(
    dataset: Dataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QWEN_UI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("QWEN_UI_DEVICE", "cpu")
    rows = dataset.write_csv(dataset.folder / "rows.csv")
    out = tmp_path / "answers.jsonl"
    first = main(["batch", str(rows), "-o", str(out), "--limit", "20", "--concurrency", "3"])
    assert len(records(out)) == 20
    assert "rows 50, done before 0, answered 18, failed 2," in capsys.readouterr().out
    second = main(["batch", str(rows), "-o", str(out), "--concurrency", "3"])
    assert "rows 50, done before 20, answered 29, failed 1," in capsys.readouterr().out
    assert first == second == 1  # rows failed (5 and 17, then 33)
    check_complete(out, dataset, [str(n) for n in range(1, ROWS + 1)])
    third = main(["batch", str(rows), "-o", str(out)])  # nothing left to do
    assert third == 0 and "answered 0, failed 0" in capsys.readouterr().out
    fourth = main(["batch", str(rows), "-o", str(out), "--retry-failed"])  # they fail again
    assert fourth == 1 and "done before 47, answered 0, failed 3," in capsys.readouterr().out
    check_complete(out, dataset, [str(n) for n in range(1, ROWS + 1)])  # one line a row


@pytest.fixture(scope="module")
def shop_oss(dataset: Dataset) -> Iterator[FakeOSS]:
    """The rows' images as objects of the shop tenant's prefix, readable by its key."""
    oss = FakeOSS(region=REGION).start()
    folder = dataset.folder / "img"
    objects = {f"{PREFIX}img/{path.name}": path.read_bytes() for path in folder.glob("*.png")}
    oss.add_bucket(BUCKET, objects)
    oss.add_key(*SHOP_KEY, {BUCKET: [PREFIX]})
    yield oss
    oss.stop()


def shop_tenant(endpoint: str) -> Tenant:
    storage = OSSConfig(region=REGION, endpoint=endpoint, bucket=BUCKET, prefix=PREFIX)
    return Tenant(id="shop", name="Shop", kind="oss", oss=storage, limits=Limits())


def issue_token(settings: Settings, tenant_id: str) -> str:
    token, record = new_token("batch")
    current = tenants_file.load(settings.tenants_path, allow_insecure=True)
    tenant = add_token(current.tenants[tenant_id], record)
    tenants_file.save(settings.tenants_path, tenants_file.with_tenant(current, tenant))
    return token


@dataclass(frozen=True)
class Server:
    process: ServerProcess
    token: str  # tenant acme's (local)
    shop_token: str  # tenant shop's (OSS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shop_oss: FakeOSS) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("home")
    settings = Settings(home=home)
    add_tenants(settings.tenants_path, local_tenant("acme"), shop_tenant(shop_oss.endpoint))
    tokens = issue_token(settings, "acme"), issue_token(settings, "shop")
    env = {
        "QWEN_UI_DEVICE": "cpu",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "QWEN_UI_ALLOW_INSECURE_OSS_ENDPOINTS": "true",
    }
    process = ServerProcess(home, env=env)
    try:
        process.wait_for("/login", timeout=240)  # a loaded CI machine starts slowly
        yield Server(process, *tokens)
    finally:
        process.stop()
    assert not any(token in process.output() for token in tokens)


@pytest.mark.e2e
def test_server_killed_mid_run_then_resumed(
    dataset: Dataset, tmp_path: Path, server: Server
) -> None:
    process, token = server.process, server.token
    rows = dataset.write_jsonl(dataset.folder / "rows.jsonl")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--server", process.url]
    args += ["--token-file", str(token_file), "--concurrency", "4"]
    with (tmp_path / "batch.log").open("w") as log:
        batch = subprocess.Popen([sys.executable, "-m", "qwen_ui.cli", *args], stderr=log)
        try:
            deadline = time.monotonic() + 240
            while len(records(out)) < 10 and batch.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            batch.kill()
            batch.wait(10)
    written = len(records(out))
    assert 10 <= written < ROWS, "the run should be stopped part way"
    assert main([*args, "--no-progress"]) == 1  # the 3 bad rows failed
    check_complete(out, dataset, [str(row["id"]) for row in dataset.rows])


@pytest.mark.e2e
def test_server_with_a_wrong_token_stops_before_any_row(
    dataset: Dataset, tmp_path: Path, server: Server
) -> None:
    process = server.process
    rows = dataset.write_jsonl(dataset.folder / "rows.jsonl")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--server", process.url, "--token", "qwu_wrong"]
    assert main(args) == 2
    assert records(out) == []


def write_oss_rows(dataset: Dataset, path: Path) -> Path:
    """The first good rows from files (``file-N``) and again from OSS (``oss-N``), an
    object that is not there, and a key outside the tenant's prefix."""
    good = [row for number, row in enumerate(dataset.rows, 1) if number not in BAD]
    lines: list[dict[str, object]] = []
    for row in good[:OSS_ROWS]:
        images = [str(image) for image in row["images"]]  # type: ignore[attr-defined]
        paths = [str(dataset.folder / image) for image in images]
        lines.append({"id": f"file-{row['id']}", "images": paths, "question": row["question"]})
        keys = [f"oss://{PREFIX}{image}" for image in images]
        lines.append({"id": f"oss-{row['id']}", "images": keys, "question": row["question"]})
    lines.append({"id": "missing", "image": f"oss://{PREFIX}img/nope.png", "question": "Q?"})
    lines.append({"id": "outside", "image": "oss://other/img/1_0.png", "question": "Q?"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def check_oss_answers(path: Path) -> None:
    """Each OSS row answered exactly as the same images from files; the two bad ones
    failed with their typed errors."""
    by_id = {str(r["id"]): r for r in records(path)}
    assert len(by_id) == 2 * OSS_ROWS + 2
    pairs = [(by_id[k], by_id["oss-" + k.removeprefix("file-")]) for k in by_id if "file-" in k]
    assert len(pairs) == OSS_ROWS
    for from_file, from_oss in pairs:
        assert from_file["error"] is None and from_oss["error"] is None, from_oss
        assert from_oss["answer"] == from_file["answer"] and from_oss["answer"]
        assert from_oss["boxes"] == from_file["boxes"]
    assert by_id["missing"]["error"]["code"] == "oss_object_missing"  # type: ignore[index]
    assert by_id["outside"]["error"]["code"] == "oss_key_rejected"  # type: ignore[index]


def oss_env(monkeypatch: pytest.MonkeyPatch, secret: str = SHOP_KEY[1]) -> None:
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", SHOP_KEY[0])
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", secret)
    monkeypatch.setenv("QWEN_UI_ALLOW_INSECURE_OSS_ENDPOINTS", "true")  # our OSS is http


def test_local_engine_reads_oss_rows_with_the_batchs_keys(
    dataset: Dataset,
    shop_oss: FakeOSS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    add_tenants(Settings(home=home).tenants_path, shop_tenant(shop_oss.endpoint))
    monkeypatch.setenv("QWEN_UI_HOME", str(home))
    monkeypatch.setenv("QWEN_UI_DEVICE", "cpu")
    rows = write_oss_rows(dataset, tmp_path / "rows.jsonl")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--no-progress"]
    assert main(args) == 2  # no keys in the environment
    assert "OSS_ACCESS_KEY_ID" in capsys.readouterr().err
    oss_env(monkeypatch, secret="not-the-secret-0001-abcdefghijkl")
    assert main([*args, "--tenant", "shop"]) == 2
    assert "SignatureDoesNotMatch" in capsys.readouterr().err
    oss_env(monkeypatch)
    assert main(args) == 2  # whose bucket?
    assert "--tenant" in capsys.readouterr().err
    assert records(out) == []
    assert main([*args, "--tenant", "shop"]) == 1  # the two bad rows
    check_oss_answers(out)
    assert SHOP_KEY[1] not in capsys.readouterr().err + out.read_text()


@pytest.mark.e2e
def test_server_rows_read_oss_here_and_upload_it(
    dataset: Dataset,
    tmp_path: Path,
    server: Server,
    shop_oss: FakeOSS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    oss_env(monkeypatch)
    rows = write_oss_rows(dataset, tmp_path / "rows.jsonl")
    out = tmp_path / "answers.jsonl"
    args = ["batch", str(rows), "-o", str(out), "--server", server.process.url, "--no-progress"]
    assert main([*args, "--token", server.token]) == 2  # tenant acme has no OSS storage
    assert main([*args, "--token", server.shop_token, "--tenant", "shop"]) == 2  # local only
    assert records(out) == []
    assert main([*args, "--token", server.shop_token]) == 1
    check_oss_answers(out)
    assert SHOP_KEY[1] not in server.process.output()
