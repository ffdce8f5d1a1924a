"""python3 -m tessera.trace_server: a warm tracer, so that tracing a model file again does not start Python anew.

Importing tessera (numpy, the engine's extension) takes most of a fresh `python3 -m tessera.project_trace`. This
process imports it once and then, for each request, forks a child that runs project_trace exactly as a fresh
interpreter would: the user's model.py and what it imports are loaded in the child, and a model that raises,
loops or crashes the interpreter takes down that child only. The engine (engine/project/trace_server.cpp) talks
to it over stdin and stdout, one JSON line each way:

    request:  {"args": [project_trace's arguments], "log": "where the child's output goes", "cwd": "..."}
    replies:  {"pid": N}              as soon as the child runs (the engine stops it when it runs too long)
              {"pid": N, "status": S} when it has ended (S: its wait status, as waitpid gives it)

It ends when stdin closes (the engine exited)."""
import json
import os
import signal
import sys
import traceback

from . import project_trace


def _run_child(request):
    """In the forked child: project_trace with its output in the log; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        sys.argv = ["python3 -m tessera.project_trace"] + list(request["args"])
        project_trace.main(request["args"])
        code = 0
    except SystemExit as e:  # argparse's errors, sys.exit in the model
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(requests, replies):
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        replies.write(json.dumps({"pid": pid, "status": status}) + "\n")
        replies.flush()


def main():
    try:
        serve(sys.stdin, sys.stdout)
    except (KeyboardInterrupt, BrokenPipeError):  # Ctrl-C in the engine's terminal, or the engine has gone
        pass


if __name__ == "__main__":
    main()
