//! Play on game processes (the stdio bridge): cells, the maze, replay and
//! shrink, findings and their confirmation, the explorer, a program's
//! check, environment and limits, play as a step of a plan, stuck places
//! and goals.

mod bridge;
mod budget_env_pools;
mod cells;
mod confirm;
mod explorer;
mod findings;
mod in_a_plan;
mod invariants;
mod maze_bridge;
mod maze_player;
mod program_check;
mod program_env;
mod program_limits;
mod resident_limits;
mod search_after_traps;
mod stuck_and_goals;
