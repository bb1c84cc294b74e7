//! `maze`: a small seeded house of nine rooms, with four bugs planted on
//! purpose for the playtest demo.
//!
//! # The game
//!
//! Nine rooms on a 3×3 grid, joined by doors (`north`, `east`, `south`,
//! `west`) that form a tree (one way between any two rooms). Play starts in
//! the entrance hall, the centre. What each room is comes from the seed: a
//! brass key lies in the library; the vault, a dead end far from the hall,
//! is behind a locked door that the key opens, and entering it ends the game
//! (`done`, a `goal` event, reward 10). Coins lie in some rooms (`take coin`,
//! reward 1; the key and the idol are worth 1 too). The same seed always
//! gives the same house and the same replies to the same actions; no
//! observation holds a turn counter, so coming back to a room in the same
//! state gives a byte-identical observation.
//!
//! # Planted bugs (intentional, for the demo)
//!
//! They sit next to the start so that an `explorer` (least-tried action from
//! the current observation first) finds each within 40 actions on most
//! seeds: the unit tests play 100 seeds with such an explorer (each bug is
//! found on about two thirds of them; the crash ends a game, so the bugs
//! compete), and seeds 1 to 5 together find all four.
//!
//! - **Crash** (`crash` finding): the shrine, a dead end next to the hall,
//!   holds an idol (`take idol` is fine); `use idol`, offered wherever the
//!   idol is carried, kills the process: no reply, a panic-like message on
//!   stderr, exit code 101 (`Action::UseIdol` in [`Maze::act`]).
//! - **Refused** (`refused` finding): the hall lists `down` (a trapdoor) and
//!   then refuses it: `{"ok":false,"error":"the trapdoor is jammed"}`.
//! - **Stuck** (`stuck` finding): the garden, the dead end opposite the
//!   shrine across the hall, is full of fog: it lists all four directions,
//!   and each leaves the observation byte-identical, for [`FOG_ACTIONS`]` - 1`
//!   actions in a row (more than the default `stuck_after` of 8); the
//!   [`FOG_ACTIONS`]th lifts the fog and shows the one way out, an exit that
//!   only patience reaches.
//! - **Error event** (`error` finding): `read sign` in the hall answers
//!   `ok:true`, changes nothing, and carries an event of kind `error` ("the
//!   sign's text is missing").
//!
//! # The shortest crash
//!
//! On every seed the shortest action sequence from `reset` that crashes is
//! three actions: the door to the shrine, `take idol`, `use idol`. For seed 7
//! it is [`SEED_7_SHORTEST_CRASH`], `["south", "take idol", "use idol"]`. A
//! unit test finds it by breadth-first search over game states; `shrink`
//! must reduce any longer crashing trace of seed 7 to three actions. Because
//! the shrine is a dead end whose only door is the hall's, every crashing
//! sequence holds that door, `take idol` and `use idol`.

use std::borrow::Cow;
use std::fmt::Write;

use serde::Serialize;

use super::{Act, Event, Game};

/// The version `hello` reports.
pub const VERSION: &str = "1.0.0";

/// The actions it takes in the fog before the fog lifts (the last one lifts it).
pub const FOG_ACTIONS: u8 = 10;

/// The shortest action sequence from `reset` with seed 7 that crashes the game.
pub const SEED_7_SHORTEST_CRASH: &[&str] = &["south", "take idol", "use idol"];

const ROOMS: usize = 9;
const HALL: u8 = 4;

const REWARD_VAULT: i64 = 10;
const REWARD_ITEM: i64 = 1;

/// A tiny seeded PRNG (splitmix64): the same seed gives the same house on
/// every platform, without a dependency.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` ≥ 1; the modulo bias is irrelevant here).
    fn below(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.next() % n64).unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    North,
    East,
    South,
    West,
}

impl Dir {
    const ALL: [Dir; 4] = [Dir::North, Dir::East, Dir::South, Dir::West];

    fn name(self) -> &'static str {
        match self {
            Dir::North => "north",
            Dir::East => "east",
            Dir::South => "south",
            Dir::West => "west",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn opposite(self) -> Dir {
        Dir::ALL[(self.index() + 2) % 4]
    }
}

/// The grid neighbour of `room` in `dir`, if inside the 3×3 grid.
fn neighbour(room: u8, dir: Dir) -> Option<u8> {
    let (x, y) = (room % 3, room / 3);
    match dir {
        Dir::North if y > 0 => Some(room - 3),
        Dir::South if y < 2 => Some(room + 3),
        Dir::West if x > 0 => Some(room - 1),
        Dir::East if x < 2 => Some(room + 1),
        _ => None,
    }
}

/// What a room is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Hall,
    /// The garden full of fog (the stuck bug).
    Garden,
    /// The idol's shrine (the crash bug).
    Shrine,
    Library,
    Vault,
    /// An ordinary room: an index into [`PLAIN`].
    Plain(u8),
}

/// Ordinary rooms: id and description.
const PLAIN: [(&str, &str); 6] = [
    (
        "kitchen",
        "A cold kitchen; copper pots hang above a dead hearth.",
    ),
    (
        "gallery",
        "A long gallery of portraits whose eyes seem to follow you.",
    ),
    ("armory", "An armory of empty racks and one rusty helmet."),
    ("storeroom", "A damp storeroom stacked with crates."),
    (
        "music room",
        "A music room with a piano missing half its keys.",
    ),
    (
        "study",
        "A study with a cold fireplace and an empty armchair.",
    ),
];

/// A house: doors, what each room is, where coins lie. Drawn from the seed.
#[derive(Debug, Clone)]
struct House {
    /// `doors[room][dir]`: the room behind that door.
    doors: [[Option<u8>; 4]; ROOMS],
    roles: [Role; ROOMS],
    /// Rooms that start with a coin (bit per room).
    coins: u16,
    vault: u8,
}

impl House {
    fn generate(seed: u64) -> House {
        let mut rng = SplitMix64(seed ^ 0x6d61_7a65_6d61_7a65);
        // Random spanning trees until one has three dead ends besides the
        // hall (garden, shrine, vault), two of them next to the hall; a few
        // dozen tries at most, and deterministic, since the tries come from
        // the seed's own stream.
        loop {
            let doors = spanning_tree(&mut rng);
            if let Some(house) = House::with_roles(doors, &mut rng) {
                return house;
            }
        }
    }

    fn with_roles(doors: [[Option<u8>; 4]; ROOMS], rng: &mut SplitMix64) -> Option<House> {
        let depth = depths(&doors);
        let mut dead_ends: Vec<(u8, usize, u64)> = (0..9u8)
            .filter(|&r| r != HALL && doors[usize::from(r)].iter().flatten().count() == 1)
            .map(|r| (r, depth[usize::from(r)], rng.next()))
            .collect();
        // Nearest first, ties broken by the seed.
        dead_ends.sort_by_key(|&(_, d, tie)| (d, tie));
        if dead_ends.len() < 3 || dead_ends[1].1 > 1 {
            return None;
        }
        let shrine = dead_ends[0].0;
        let garden = dead_ends[1].0;
        let vault = dead_ends[2..]
            .iter()
            .max_by_key(|&&(_, d, tie)| (d, tie))
            .map(|&(r, _, _)| r)?;
        let mut roles = [Role::Hall; ROOMS];
        roles[usize::from(shrine)] = Role::Shrine;
        roles[usize::from(garden)] = Role::Garden;
        roles[usize::from(vault)] = Role::Vault;
        let mut others: Vec<u8> = (0..9u8)
            .filter(|&r| r != HALL && r != shrine && r != garden && r != vault)
            .collect();
        let library = others.remove(rng.below(others.len()));
        roles[usize::from(library)] = Role::Library;
        let mut kinds: Vec<u8> = (0..6).collect();
        let mut coins = 0u16;
        for room in others {
            let kind = kinds.remove(rng.below(kinds.len()));
            roles[usize::from(room)] = Role::Plain(kind);
            if rng.next() & 1 == 1 {
                coins |= 1 << room;
            }
        }
        Some(House {
            doors,
            roles,
            coins,
            vault,
        })
    }

    fn role(&self, room: u8) -> Role {
        self.roles[usize::from(room)]
    }
}

/// A random spanning tree of the 3×3 grid (randomized Prim from the hall,
/// which branches more than a depth-first walk).
fn spanning_tree(rng: &mut SplitMix64) -> [[Option<u8>; 4]; ROOMS] {
    let mut doors = [[None; 4]; ROOMS];
    let mut inside = 1u16 << HALL;
    let mut frontier: Vec<(u8, Dir)> = Vec::with_capacity(16);
    let add_edges = |frontier: &mut Vec<(u8, Dir)>, room: u8| {
        for dir in Dir::ALL {
            if neighbour(room, dir).is_some() {
                frontier.push((room, dir));
            }
        }
    };
    add_edges(&mut frontier, HALL);
    while !frontier.is_empty() {
        let (from, dir) = frontier.swap_remove(rng.below(frontier.len()));
        let Some(to) = neighbour(from, dir) else {
            continue;
        };
        if inside & (1 << to) != 0 {
            continue;
        }
        inside |= 1 << to;
        doors[usize::from(from)][dir.index()] = Some(to);
        doors[usize::from(to)][dir.opposite().index()] = Some(from);
        add_edges(&mut frontier, to);
    }
    doors
}

/// Each room's distance from the hall, in doors.
fn depths(doors: &[[Option<u8>; 4]; ROOMS]) -> [usize; ROOMS] {
    let mut depth = [usize::MAX; ROOMS];
    depth[usize::from(HALL)] = 0;
    let mut queue = vec![HALL];
    let mut next = 0;
    while let Some(&room) = queue.get(next) {
        next += 1;
        for &to in doors[usize::from(room)].iter().flatten() {
            if depth[usize::from(to)] == usize::MAX {
                depth[usize::from(to)] = depth[usize::from(room)] + 1;
                queue.push(to);
            }
        }
    }
    depth
}

/// What a listed action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Go(Dir),
    /// Any action in the fog: nothing changes (until the fog lifts).
    Grope,
    TakeCoin,
    TakeKey,
    TakeIdol,
    /// Planted crash.
    UseIdol,
    /// Planted `error` event.
    ReadSign,
    /// Planted refusal of a listed action.
    Trapdoor,
}

/// The game: a house and where the player is in it.
#[derive(Debug, Clone)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is one fact of the game's state"
)]
pub struct Maze {
    house: Option<House>,
    room: u8,
    has_key: bool,
    has_idol: bool,
    coins: u32,
    /// Coins taken so far (bit per room).
    taken: u16,
    fog_actions: u8,
    fog_lifted: bool,
    score: i64,
    done: bool,
    // The observation of the current state, rebuilt after each action into
    // buffers that live as long as the game.
    text: String,
    actions: Vec<(&'static str, Action)>,
    action_names: Vec<&'static str>,
    events: Vec<Event>,
}

impl Default for Maze {
    fn default() -> Self {
        Maze::new()
    }
}

#[derive(Serialize)]
struct Observation<'a> {
    text: &'a str,
    actions: &'a [&'static str],
    state: State<'a>,
    score: i64,
}

#[derive(Serialize)]
struct State<'a> {
    room: &'static str,
    inventory: &'a [&'static str],
    coins: u32,
}

impl Maze {
    pub fn new() -> Maze {
        Maze {
            house: None,
            room: HALL,
            has_key: false,
            has_idol: false,
            coins: 0,
            taken: 0,
            fog_actions: 0,
            fog_lifted: false,
            score: 0,
            done: false,
            text: String::with_capacity(256),
            actions: Vec::with_capacity(8),
            action_names: Vec::with_capacity(8),
            events: Vec::with_capacity(2),
        }
    }

    fn room_id(&self, house: &House) -> &'static str {
        match house.role(self.room) {
            Role::Hall => "hall",
            Role::Garden => "garden",
            Role::Shrine => "shrine",
            Role::Library => "library",
            Role::Vault => "vault",
            Role::Plain(kind) => PLAIN[usize::from(kind)].0,
        }
    }

    fn in_fog(&self, house: &House) -> bool {
        house.role(self.room) == Role::Garden && !self.fog_lifted
    }

    /// Rebuilds the text and the action list from the state.
    fn describe(&mut self) {
        let Some(house) = self.house.as_ref() else {
            return;
        };
        let room = self.room;
        self.text.clear();
        self.actions.clear();
        if self.in_fog(house) {
            self.text.push_str(
                "Thick fog fills this place. You cannot see the walls, let alone a door.",
            );
            self.actions
                .extend(Dir::ALL.iter().map(|&d| (d.name(), Action::Grope)));
        } else {
            self.text.push_str(match house.role(room) {
                Role::Hall => {
                    "You stand in the entrance hall of an old house. A faded sign hangs \
                     on the wall and a trapdoor is set in the floor."
                }
                Role::Garden => "The fog has lifted: this is a small walled garden.",
                Role::Shrine if !self.has_idol => {
                    "A dim shrine. A golden idol rests on the altar, humming faintly."
                }
                Role::Shrine => "A dim shrine with an empty altar.",
                Role::Library => "Dusty shelves line the walls of the library.",
                Role::Vault => "The vault! Gold and jewels everywhere: you found the treasure.",
                Role::Plain(kind) => PLAIN[usize::from(kind)].1,
            });
            let doors = house.doors[usize::from(room)];
            let count = doors.iter().flatten().count();
            if count > 0 && house.role(room) != Role::Vault {
                self.text.push_str(if count == 1 {
                    " A door leads"
                } else {
                    " Doors lead"
                });
                let mut written = 0;
                for dir in Dir::ALL {
                    if doors[dir.index()].is_some() {
                        written += 1;
                        let joint = match written {
                            1 => " ",
                            n if n == count => " and ",
                            _ => ", ",
                        };
                        let _ = write!(self.text, "{joint}{}", dir.name());
                        self.actions.push((dir.name(), Action::Go(dir)));
                    }
                }
                self.text.push('.');
                for dir in Dir::ALL {
                    if doors[dir.index()] == Some(house.vault) {
                        let _ = write!(self.text, " The door {} is locked.", dir.name());
                    }
                }
            }
            match house.role(room) {
                Role::Hall => {
                    self.actions.push(("read sign", Action::ReadSign));
                    self.actions.push(("down", Action::Trapdoor));
                }
                Role::Shrine if !self.has_idol => {
                    self.actions.push(("take idol", Action::TakeIdol));
                }
                Role::Library if !self.has_key => {
                    self.text.push_str(" A brass key lies on the reading desk.");
                    self.actions.push(("take key", Action::TakeKey));
                }
                _ => {}
            }
            if (house.coins & !self.taken) & (1 << room) != 0 {
                self.text.push_str(" A coin glints on the floor.");
                self.actions.push(("take coin", Action::TakeCoin));
            }
            if self.has_idol {
                self.actions.push(("use idol", Action::UseIdol));
            }
        }
        self.action_names.clear();
        self.action_names
            .extend(self.actions.iter().map(|&(name, _)| name));
    }
}

impl Game for Maze {
    fn reset(&mut self, seed: u64) {
        self.house = Some(House::generate(seed));
        self.room = HALL;
        self.has_key = false;
        self.has_idol = false;
        self.coins = 0;
        self.taken = 0;
        self.fog_actions = 0;
        self.fog_lifted = false;
        self.score = 0;
        self.done = false;
        self.events.clear();
        self.describe();
    }

    fn playing(&self) -> bool {
        self.house.is_some() && !self.done
    }

    /// Plays one listed action; see the module doc for the planted bugs.
    fn act(&mut self, action: &str) -> Act {
        self.events.clear();
        let Some(house) = self.house.as_ref() else {
            return Act::Refused(Cow::Borrowed("no game: send reset first"));
        };
        let Some(&(_, chosen)) = self.actions.iter().find(|&&(name, _)| name == action) else {
            return Act::Refused(Cow::Owned(format!(
                "`{action}` is not an action here; the actions are: {}",
                self.action_names.join(", ")
            )));
        };
        let mut reward = 0;
        match chosen {
            Action::Go(dir) => {
                let Some(to) = house.doors[usize::from(self.room)][dir.index()] else {
                    return Act::Refused(Cow::Borrowed("there is no door that way"));
                };
                if to == house.vault && !self.has_key {
                    self.events.push(Event {
                        kind: "log",
                        message: "the door is locked: it needs a key",
                    });
                } else {
                    self.room = to;
                    if to == house.vault {
                        reward = REWARD_VAULT;
                        self.done = true;
                        self.events.push(Event {
                            kind: "goal",
                            message: "you opened the vault",
                        });
                    } else if house.role(to) == Role::Garden && !self.fog_lifted {
                        self.fog_actions = 0;
                    }
                }
            }
            Action::Grope => {
                self.fog_actions = self.fog_actions.saturating_add(1);
                if self.fog_actions >= FOG_ACTIONS {
                    self.fog_lifted = true;
                    self.events.push(Event {
                        kind: "log",
                        message: "the fog lifts",
                    });
                }
            }
            Action::TakeCoin => {
                self.taken |= 1 << self.room;
                self.coins += 1;
                reward = REWARD_ITEM;
            }
            Action::TakeKey => {
                self.has_key = true;
                reward = REWARD_ITEM;
            }
            Action::TakeIdol => {
                self.has_idol = true;
                reward = REWARD_ITEM;
            }
            // Planted bug (crash): the idol's curse takes the process down.
            Action::UseIdol => {
                return Act::Crash(
                    "index out of bounds: the len is 0 but the index is 0 \
                     (the idol's curse: this crash is planted on purpose)",
                );
            }
            // Planted bug (error event): the sign's text was never written.
            Action::ReadSign => self.events.push(Event {
                kind: "error",
                message: "the sign's text is missing: no string for `hall.sign`",
            }),
            // Planted bug (refused): listed, then refused.
            Action::Trapdoor => {
                return Act::Refused(Cow::Borrowed("the trapdoor is jammed"));
            }
        }
        self.score += reward;
        self.describe();
        Act::Played {
            reward,
            done: self.done,
        }
    }

    fn observation(&self) -> impl Serialize + '_ {
        let inventory: &[&str] = match (self.has_key, self.has_idol) {
            (false, false) => &[],
            (true, false) => &["key"],
            (false, true) => &["idol"],
            (true, true) => &["idol", "key"],
        };
        Observation {
            text: &self.text,
            actions: &self.action_names,
            state: State {
                room: self.house.as_ref().map_or("none", |h| self.room_id(h)),
                inventory,
                coins: self.coins,
            },
            score: self.score,
        }
    }

    fn events(&self) -> &[Event] {
        &self.events
    }
}

#[cfg(test)]
mod tests;
