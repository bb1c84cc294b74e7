#!/usr/bin/env python3
"""The Python driver loop for bridge protocol v1 that a competent user
writes: the peer `gameplan __simulate` is measured against
(bench/simulate.sh). Default buffered pipes, one write and one flush per
request, the standard json module, a multiprocessing pool.

It does what gameplan's simulate does, minus everything gameplan adds
(findings, observation hashes, traces): WORKERS processes, each keeping one
game process and playing its share of GAMES seeded games (reset, then a
uniformly random listed action until done or MAX_STEPS), starting a fresh
game process after a crash (the dead one killed and reaped) and playing on
after a refused action. Prints games/s and the driver's own CPU time
per action (game processes excluded).

usage: simulate_driver.py GAMES WORKERS MAX_STEPS -- COMMAND...
"""
import json
import multiprocessing
import random
import resource
import subprocess
import sys
import time


class Game:
    def __init__(self, command):
        # Default buffering (bufsize=-1): readline() reads the pipe in 8 KiB
        # chunks, and a request is written whole with one flush.
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.out = self.proc.stdin
        self.inp = self.proc.stdout
        self.id = 0
        self.ask({"op": "hello", "protocol": 1})

    def ask(self, request):
        self.id += 1
        request["id"] = self.id
        self.out.write((json.dumps(request) + "\n").encode())
        self.out.flush()
        line = self.inp.readline()
        if not line:
            raise EOFError("the game died")
        reply = json.loads(line)
        if reply.get("id") != self.id:
            raise ValueError("wrong id")
        return reply

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def worker(args):
    command, games, max_steps = args
    game = None
    steps = completed = crashed = truncated = 0
    for seed in games:
        rng = random.Random(seed)
        try:
            if game is None:
                game = Game(command)
            obs = game.ask({"op": "reset", "seed": seed})["observation"]
            for n in range(max_steps + 1):
                if n == max_steps:
                    truncated += 1
                    break
                if not obs["actions"]:
                    break
                reply = game.ask({"op": "act", "action": rng.choice(obs["actions"])})
                steps += 1
                if reply["ok"]:
                    obs = reply["observation"]
                    if reply.get("done"):
                        completed += 1
                        break
        except (EOFError, ValueError, BrokenPipeError):
            crashed += 1
            game.kill()
            game = None
    if game is not None:
        try:
            game.ask({"op": "close"})
        except (EOFError, ValueError, BrokenPipeError):
            pass
        game.kill()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return steps, completed, crashed, truncated, usage.ru_utime + usage.ru_stime


def main():
    sep = sys.argv.index("--")
    games, workers, max_steps = (int(a) for a in sys.argv[1:sep])
    command = sys.argv[sep + 1:]
    shares = [(command, range(1 + w, games + 1, workers), max_steps) for w in range(workers)]
    started = time.perf_counter()
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(worker, shares)
    elapsed = time.perf_counter() - started
    steps = sum(r[0] for r in results)
    cpu = sum(r[4] for r in results)
    print(f"games {games}  completed {sum(r[1] for r in results)}  crashed {sum(r[2] for r in results)}  "
          f"truncated {sum(r[3] for r in results)}  steps {steps}")
    print(f"{elapsed:.3f} s, {games / elapsed:.1f} games/s, {steps / elapsed:.0f} actions/s")
    print(f"runner cpu {cpu:.3f} s ({cpu * 1e6 / max(steps, 1):.1f} us per action, game processes excluded)")


if __name__ == "__main__":
    main()
