"""The checked option types: what each accepts and refuses, and the one-line error."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from inswitch.cliopts import Choice, Float, Int, Text, Words, checked_type, option, run


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    @app.command("t")
    def t(
        a: int = option(1, "--a", type=Int(1, 10), help="A."),
        f: float = option(0.5, "--f", type=Float(0, 1, hi_open=True), help="F."),
        w: Any = option("all", "--w", type=Words(["x", "y"], "all"), help="W."),
        c: str = option("x", "--c", type=Choice("x", "y"), help="C."),
        n: str = option("r", "--n", type=Text("a name"), help="N."),
    ) -> None:
        print(repr((a, f, w, c, n)))

    return app


def test_valid_values_parse(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_app(), ["t", "--a", "10", "--f", "0", "--w", "y,x", "--c", "y"]) == 0
    assert capsys.readouterr().out.strip() == repr((10, 0.0, ["y", "x"], "y", "r"))
    assert run(_app(), ["t"]) == 0
    assert capsys.readouterr().out.strip() == repr((1, 0.5, ["x", "y"], "x", "r"))


def test_every_invalid_sample_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    app = _app()
    cmd = typer.main.get_command(app).commands["t"]  # type: ignore[attr-defined]
    seen = 0
    for p in cmd.params:
        ty = checked_type(p)
        assert ty is not None, p.name
        for bad in ty.invalid_samples():
            assert run(app, ["t", p.opts[0], bad]) == 2, (p.name, bad)
            err = capsys.readouterr().err.strip()
            assert "\n" not in err and err.startswith("inswitch t: error:") and p.opts[0] in err, err
            seen += 1
    assert seen >= 20


def test_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_app(), ["t", "--nope", "1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_shared_types(tmp_path: Any) -> None:
    from inswitch.cliopts import JSON_PATH, OUT_DIR, PROGRAMS, SEED, Address

    assert Int(8, 252, multiple_of=4)("12") == 12
    for bad in ("10", "7", "256"):
        with pytest.raises(typer.BadParameter):
            Int(8, 252, multiple_of=4)(bad)
    assert "9" in Int(8, 252, multiple_of=4).invalid_samples()
    assert Address()(" 127.0.0.1:0") == "127.0.0.1:0" and Address(off_ok=True)("OFF") == "off"
    assert Address()("[::1]:9559") == "[::1]:9559"
    for bad in ("off", "127.0.0.1", "127.0.0.1:65536"):
        with pytest.raises(typer.BadParameter):
            Address()(bad)
    assert JSON_PATH("-") == "-"
    target = tmp_path / "new" / "r.json"
    assert JSON_PATH(str(target)) == str(target) and target.parent.is_dir() and not target.exists()
    with pytest.raises(typer.BadParameter, match="directory"):
        JSON_PATH(str(tmp_path))
    assert OUT_DIR(str(tmp_path / "d")) and (tmp_path / "d").is_dir()
    assert PROGRAMS(" forward , daiet") == "forward,daiet" and PROGRAMS("netsha:slots=8") == "netsha:slots=8"
    for bad in ("nosuch", "forward,forward", "netsha:slots=99", ""):
        with pytest.raises(typer.BadParameter):
            PROGRAMS(bad)
    assert SEED("4294967295") == 2**32 - 1
    with pytest.raises(typer.BadParameter):
        SEED("-1")
