#!/usr/bin/env python3
"""Coins: a tiny, well-behaved bridge game (gameplan bridge protocol v1).

Five rooms in a row; the seed hides three coins in them. Walk left and
right, take the coins; taking the third ends the game. Play it with
`command = ["python3", "examples/games/coins.py"]` in a plan's [game].
"""
import json
import random
import sys

ROOMS = 5


def observation(state):
    here = state["at"]
    actions = []
    if here > 0:
        actions.append("left")
    if here < ROOMS - 1:
        actions.append("right")
    if here in state["coins"]:
        actions.append("take coin")
    coin = " A coin glints on the floor." if here in state["coins"] else ""
    text = f"Room {here + 1} of {ROOMS}.{coin} Coins in your purse: {state['purse']}."
    return {"text": text, "actions": actions,
            "state": {"at": here, "coins": sorted(state["coins"]), "purse": state["purse"]},
            "score": state["purse"]}


def main():
    state = None
    for line in iter(sys.stdin.readline, ""):
        req = json.loads(line)
        reply = {"id": req["id"], "ok": True}
        op = req["op"]
        if op == "hello":
            reply.update(name="coins", version="1.0.0", protocol=1)
        elif op == "reset":
            rng = random.Random(req["seed"])
            state = {"at": 0, "coins": set(rng.sample(range(ROOMS), 3)), "purse": 0}
            reply["observation"] = observation(state)
        elif op == "act":
            action = req["action"]
            events = []
            if action not in observation(state)["actions"]:
                reply = {"id": req["id"], "ok": False, "error": f"cannot {action} here"}
            else:
                if action == "left":
                    state["at"] -= 1
                elif action == "right":
                    state["at"] += 1
                else:
                    state["coins"].discard(state["at"])
                    state["purse"] += 1
                    events.append({"kind": "goal", "message": "a coin"})
                done = not state["coins"]
                reply.update(observation=observation(state), reward=1 if events else 0,
                             done=done, events=events)
        elif op == "close":
            print(json.dumps(reply), flush=True)
            return
        else:
            reply = {"id": req["id"], "ok": False, "error": f"unknown op {op}"}
        print(json.dumps(reply), flush=True)


main()
