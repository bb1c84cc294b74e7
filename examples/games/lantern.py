#!/usr/bin/env python3
"""Lantern: a small text adventure for gameplan (bridge protocol v1, docs/bridge.md).

Seven rooms of an old manor. Find the lantern, read by its light, take the
key from the library and unlock the shed in the garden to win. The seed
decides where the lantern lies (the gate or the hall), the title of the
book and the flowers in the garden.

    gate --north-- hall --north-- library --down (key)-- cellar
                    |  \\
                 west   up ---- tower
                    |    \\
                 garden   down -- crypt

Planted bugs, one of each kind gameplan's play finds (they are the point of
this example; do not fix them):

1. crash:   in the cellar, `drink from well` raises a KeyError and the
            process dies (traceback on stderr). The cellar is behind the
            library's trapdoor, which needs the key, which needs the lantern.
2. hang:    in the tower, `ring bell` while carrying the lantern waits for
            an echo that never fades: no answer, ever.
3. error:   in the library, `read book` by lantern light answers with an
            `error` event (the book's text is missing) and play goes on.
4. refused: in the garden, `open gate` is listed but always refused.
5. stuck:   the crypt (`go down` from the hall) is a softlock: the door
            slams, and `push wall` and `shout` change nothing, forever.

No dependencies. Run it by hand: `python3 examples/games/lantern.py`, then
type `{"id":1,"op":"hello","protocol":1}` and `{"id":2,"op":"reset","seed":1}`.
"""
import json
import random
import sys
import time

BOOKS = ["Lore of the Lantern", "A Short History of Keys", "Gardens of the North"]
FLOWERS = ["roses", "tulips", "foxgloves", "lilies"]


def new_game(seed):
    rng = random.Random(seed)
    return {
        "room": "gate",
        "inventory": [],
        "lantern_at": rng.choice(["gate", "hall"]),
        "key_taken": False,
        "book": rng.choice(BOOKS),
        "flowers": rng.choice(FLOWERS),
        "picked": 0,
        "shed_open": False,
    }


def describe(g):
    room = g["room"]
    lit = "lantern" in g["inventory"]
    lantern_here = g["lantern_at"] == room
    if room == "gate":
        text = "The manor gate. A gravel path leads north to the hall."
        actions = ["go north"]
    elif room == "hall":
        text = "A cold hall. Doors north and west, stairs up, and a dark stairway down."
        actions = ["go north", "go west", "go up", "go down", "go south"]
    elif room == "library":
        if lit:
            text = f"The library, by lantern light. A book lies open: {g['book']}."
            actions = ["read book", "go south"]
            if not g["key_taken"]:
                text += " A brass key hangs on a hook."
                actions.append("take key")
            if "key" in g["inventory"]:
                text += " A locked trapdoor is set in the floor."
                actions.append("go down")
        else:
            text = "The library is pitch dark. You can't see a thing."
            actions = ["go south"]
    elif room == "cellar":
        text = "A damp cellar. An old well gurgles in the corner."
        actions = ["drink from well", "go up"]
    elif room == "tower":
        text = "The bell tower. A great bronze bell hangs above you."
        actions = ["ring bell", "go down"]
    elif room == "garden":
        text = f"An overgrown garden full of {g['flowers']}. A rusty gate, and a shed."
        actions = ["pick flower", "open gate", "go east"]
        if "key" in g["inventory"] and not g["shed_open"]:
            actions.append("unlock shed")
    elif room == "crypt":
        text = "The crypt. The door has slammed shut behind you. Cold stone all around."
        actions = ["push wall", "shout"]
    else:
        raise ValueError(room)
    if lantern_here:
        text += " An unlit lantern stands by the wall."
        actions.append("take lantern")
    return {
        "text": text,
        "actions": actions,
        "state": {"room": room, "inventory": sorted(g["inventory"]), "picked": g["picked"]},
        "score": g["picked"] + (10 if g["shed_open"] else 0),
    }


MOVES = {
    ("gate", "go north"): "hall",
    ("hall", "go south"): "gate",
    ("hall", "go north"): "library",
    ("hall", "go west"): "garden",
    ("hall", "go up"): "tower",
    ("hall", "go down"): "crypt",
    ("library", "go south"): "hall",
    ("library", "go down"): "cellar",
    ("cellar", "go up"): "library",
    ("tower", "go down"): "hall",
    ("garden", "go east"): "hall",
}


def act(g, action):
    """Plays one action. Returns (error or None, events, done)."""
    if action not in describe(g)["actions"]:
        return f"you can't {action} here", [], False
    events = []
    room = g["room"]
    if (room, action) in MOVES:
        g["room"] = MOVES[(room, action)]
    elif action == "take lantern":
        g["lantern_at"] = None
        g["inventory"].append("lantern")
    elif action == "take key":
        g["key_taken"] = True
        g["inventory"].append("key")
    elif action == "read book":
        pages = {"Lore of the Lantern": "Light reveals the way."}
        if g["book"] in pages:
            events.append({"kind": "log", "message": pages[g["book"]]})
        else:
            events.append({"kind": "error", "message": f"missing text for book '{g['book']}'"})
    elif action == "drink from well":
        thirst = {"water": 1}
        thirst[g["inventory"][0]] -= 1  # KeyError: the first thing carried is never "water"
    elif action == "ring bell":
        echo = 3
        while echo > 0:  # waits for the echo to fade; it never does while the lantern hums
            time.sleep(0.1)
            if "lantern" not in g["inventory"]:
                echo -= 1
        events.append({"kind": "log", "message": "the bell tolls"})
    elif action == "pick flower":
        g["picked"] += 1
    elif action == "open gate":
        return "the gate is rusted shut", [], False
    elif action == "unlock shed":
        g["shed_open"] = True
        events.append({"kind": "goal", "message": "the shed is open"})
        return None, events, True
    # push wall, shout: nothing happens
    return None, events, False


def main():
    game = None
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        rid, op = req.get("id"), req.get("op")
        reply = {"id": rid, "ok": True}
        if op == "hello":
            if req.get("protocol") != 1:
                reply = {"id": rid, "ok": False, "error": "lantern speaks protocol 1"}
            else:
                reply.update(name="lantern", version="0.1.0", protocol=1)
        elif op == "reset":
            game = new_game(req["seed"])
            reply["observation"] = describe(game)
        elif op == "act":
            if game is None:
                reply = {"id": rid, "ok": False, "error": "reset first"}
            else:
                error, events, done = act(game, req["action"])
                if error:
                    reply = {"id": rid, "ok": False, "error": error}
                else:
                    reply.update(observation=describe(game), reward=0, done=done, events=events)
        elif op == "close":
            print(json.dumps(reply), flush=True)
            return
        else:
            reply = {"id": rid, "ok": False, "error": f"unknown op {op}"}
        print(json.dumps(reply), flush=True)
        print(f"lantern: {op} -> {game['room'] if game else '-'}", file=sys.stderr)


main()
