"""What people read: no text is taken for markup, messages stay one line, pipes get whole
lines, and results go to stdout while notes go to stderr."""

from __future__ import annotations

import pytest

from scaletrain.core import console


def test_brackets_in_messages_are_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    console.error(
        "a job name [bold]x[/bold] in the wrong [section]",
        "pip install 'scaletrain[torch]' or 'scaletrain[plots]'",
    )
    assert capsys.readouterr().err == (
        "error: a job name [bold]x[/bold] in the wrong [section]\n"
        "HINT: pip install 'scaletrain[torch]' or 'scaletrain[plots]'\n"
    )


def test_a_message_with_line_breaks_stays_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    console.warning("name a\nb, escape \x1b[31m, record separator \x1e")
    assert capsys.readouterr().err == (
        "warning: name a\\x0ab, escape \\x1b[31m, record separator \\x1e\n"
    )


def test_results_go_to_stdout_unwrapped_and_notes_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long_value = "word " * 60
    console.show(console.table([("key", long_value), ("[red]", "[/]")], title="t [x]"))
    console.info("a note")
    captured = capsys.readouterr()
    rows = [line for line in captured.out.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and long_value.strip() in rows[0]  # one line per row, not wrapped
    assert "[red]" in rows[1] and "[/]" in rows[1]
    assert captured.out.startswith("t [x]")
    assert captured.err == "a note\n"
