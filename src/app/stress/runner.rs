//! A built-in scenario run step by step in the panel: the list it is
//! picked from (`n`), and the steps sent through the worker.

use serde::Serialize;

use crate::scenario::{self, Action as ScenarioAction, Scenario, Variant};

use super::{KeyUse, OomAdvice, PanelModal, StressAction, StressCommand, StressPanel, cap_refusal};

/// The list of built-in scenarios while it is open (`n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScenarioPicker {
    /// (name, title) of each built-in scenario, in [`scenario::BUILTIN`]
    /// order.
    pub entries: Vec<(String, String)>,
    pub selected: usize,
}

/// A built-in scenario loaded into the panel, stepped through the worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioRun {
    /// Index into [`scenario::BUILTIN`].
    pub builtin: usize,
    pub scenario: Scenario,
    /// Index into `scenario.variants`.
    pub variant: usize,
    /// Index into `scenario.steps` from which the next step is looked for.
    pub cursor: usize,
    /// Steps of this variant sent so far (the engine's 1-based step number
    /// of the last one).
    pub done: usize,
    /// Steps automatically, one per device answer.
    pub running: bool,
    /// Held scenario names and their panel tensor ids, in allocation order.
    pub names: Vec<(String, u64)>,
    /// The names of the alloc step with the worker.
    pub pending: Vec<String>,
    /// The command with the worker is one of this scenario's steps.
    pub in_flight: bool,
    /// How the last step sent ended, when the device refused it (an OOM
    /// or another failure); `None` while it succeeded or is in flight.
    pub stopped: Option<ScenarioStop>,
}

/// Why the last step of a scenario run did not complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ScenarioStop {
    /// The allocator ran out of memory; `tried` is PyTorch's "Tried to
    /// allocate" (bytes).
    OutOfMemory { tried: u64 },
    /// The device said no for another reason (the panel's message says it).
    Failed,
}

impl ScenarioRun {
    /// `advice` as it applies in this scenario: settings are tried by the
    /// next variant that sets `expandable_segments:True` or
    /// `max_split_size_mb` (other than the settings that ran out of
    /// memory), not by the settings field, which replaces the allocator
    /// the steps run on.
    pub fn advice_here(&self, advice: OomAdvice) -> OomAdvice {
        let OomAdvice::TrySettings {
            reusable,
            max_split_mb,
        } = advice
        else {
            return advice;
        };
        let variants = &self.scenario.variants;
        let now = variants.get(self.variant).map(|v| v.alloc_conf.as_str());
        let sets = |conf: &str| {
            conf.contains("expandable_segments:True") || conf.contains("max_split_size_mb")
        };
        (1..variants.len())
            .find(|k| {
                variants
                    .get((self.variant + k) % variants.len())
                    .is_some_and(|v| sets(&v.alloc_conf) && Some(v.alloc_conf.as_str()) != now)
            })
            .map_or(
                OomAdvice::NoVariantSets {
                    reusable,
                    max_split_mb,
                },
                |presses| OomAdvice::TryVariant {
                    reusable,
                    max_split_mb,
                    presses,
                },
            )
    }

    /// The variant's name.
    pub fn variant_name(&self) -> &str {
        &self.scenario.variants[self.variant].name
    }

    /// The variant's `PYTORCH_CUDA_ALLOC_CONF`.
    pub fn alloc_conf(&self) -> &str {
        &self.scenario.variants[self.variant].alloc_conf
    }

    /// The steps this variant runs.
    pub fn total(&self) -> usize {
        let v = self.variant_name();
        self.scenario.steps.iter().filter(|s| s.runs_in(v)).count()
    }

    /// The index (into `scenario.steps`) of the next step this variant runs.
    pub fn next_index(&self) -> Option<usize> {
        let v = self.variant_name();
        (self.cursor..self.scenario.steps.len()).find(|&i| self.scenario.steps[i].runs_in(v))
    }
}

impl StressPanel {
    /// Whether the scenario list takes the keys.
    pub fn picking(&self) -> bool {
        self.scenario_picker().is_some()
    }

    /// The built-in scenario list while it is open (`n`).
    pub fn scenario_picker(&self) -> Option<&ScenarioPicker> {
        match &self.modal {
            PanelModal::ScenarioList(picker) => Some(picker),
            _ => None,
        }
    }

    /// Says that a scenario key has no scenario to act on, and which key
    /// lists them.
    pub(super) fn say_no_scenario(&mut self) {
        self.say_then(
            "no scenario loaded:",
            vec![KeyUse::act(StressAction::OpenScenarios, "lists them")],
        );
    }

    pub(super) fn open_scenarios(&mut self) {
        let entries = scenario::BUILTIN
            .iter()
            .map(|(name, text)| {
                let title = scenario::parse(text).map_or_else(|e| e.to_string(), |s| s.title);
                (name.to_string(), title)
            })
            .collect();
        let selected = self.scenario.as_ref().map_or(0, |r| r.builtin);
        let count = scenario::BUILTIN.len();
        self.modal = PanelModal::ScenarioList(ScenarioPicker { entries, selected });
        // The list's header gives the keys; the message says what a
        // scenario is, once.
        self.say(format!(
            "{count} built-in scenarios, run on a simulated device like `vramtop scenario`"
        ));
    }

    /// Moves the scenario list's cursor.
    pub fn pick_move(&mut self, up: bool) {
        if let PanelModal::ScenarioList(p) = &mut self.modal {
            p.selected = Self::step(p.selected, p.entries.len().max(1), !up);
        }
    }

    /// Enter in the scenario list: loads the selected scenario.
    pub fn pick_choose(&mut self) -> Vec<StressCommand> {
        match &self.modal {
            PanelModal::ScenarioList(p) => {
                let selected = p.selected;
                self.modal = PanelModal::Keys;
                self.apply(StressAction::LoadScenario(selected))
            }
            _ => Vec::new(),
        }
    }

    /// Esc in the scenario list.
    pub fn pick_cancel(&mut self) {
        if self.picking() {
            self.modal = PanelModal::Keys;
            self.say("no scenario chosen");
        }
    }

    pub(super) fn load_scenario(&mut self, i: usize) -> Vec<StressCommand> {
        let Some((_, text)) = scenario::BUILTIN.get(i) else {
            self.say("no such scenario");
            return Vec::new();
        };
        let scenario = match scenario::parse(text) {
            Ok(s) => s,
            Err(e) => {
                self.say(e.to_string());
                return Vec::new();
            }
        };
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let command = StressCommand::UseScenarioDevice {
            capacity: scenario.device_memory,
            processes: scenario
                .variants
                .first()
                .map(|v| v.processes(scenario.context))
                .unwrap_or_else(|| Variant::default_processes(scenario.context)),
            settings: scenario
                .variants
                .first()
                .map(|v| v.alloc_conf.clone())
                .unwrap_or_default(),
        };
        self.scenario = Some(ScenarioRun {
            builtin: i,
            scenario,
            variant: 0,
            cursor: 0,
            done: 0,
            running: false,
            names: Vec::new(),
            pending: Vec::new(),
            in_flight: false,
            stopped: None,
        });
        self.send(command)
    }

    /// Frees everything and starts a fresh allocator under the variant's
    /// settings (the reconfigure command), back to step 0.
    pub(super) fn rewind_scenario(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let Some(run) = &mut self.scenario else {
            self.say_no_scenario();
            return Vec::new();
        };
        run.cursor = 0;
        run.done = 0;
        run.running = false;
        run.pending.clear();
        run.in_flight = false;
        run.stopped = None;
        let settings = run.alloc_conf().to_string();
        // A fresh device of the scenario's size with this variant's
        // contexts (they differ between variants), as vramtop scenario runs it.
        let variant = &run.scenario.variants[run.variant];
        let command = StressCommand::UseScenarioDevice {
            capacity: run.scenario.device_memory,
            processes: variant.processes(run.scenario.context),
            settings,
        };
        self.send(command)
    }

    /// The command of the scenario's next step, chosen from the step
    /// cursor alone; advances the cursor. A cap refusal stops the run.
    pub(super) fn scenario_step(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let Some(mut run) = self.scenario.take() else {
            self.say_no_scenario();
            return Vec::new();
        };
        let commands = self.next_scenario_command(&mut run);
        if commands.is_empty() {
            run.running = false;
        }
        self.scenario = Some(run);
        commands
    }

    fn next_scenario_command(&mut self, run: &mut ScenarioRun) -> Vec<StressCommand> {
        let Some(at) = run.next_index() else {
            // A last step that ran out of memory did not finish the run.
            let how = match &run.stopped {
                Some(ScenarioStop::OutOfMemory { .. }) => format!(
                    "stopped at step {}/{} (out of memory)",
                    run.done,
                    run.total()
                ),
                Some(ScenarioStop::Failed) => {
                    format!("stopped at step {}/{} (it failed)", run.done, run.total())
                }
                None => format!("finished ({} steps)", run.done),
            };
            self.say_then(
                format!("scenario {} {how}:", run.scenario.name),
                vec![
                    KeyUse::act(StressAction::ScenarioRewind, "rewinds"),
                    KeyUse::act(StressAction::ScenarioNextVariant, "tries the next variant"),
                ],
            );
            return Vec::new();
        };
        let step = &run.scenario.steps[at];
        let command = match &step.action {
            ScenarioAction::Alloc { names, size } => {
                let request = size.saturating_mul(names.len() as u64);
                let cap = self.active_cap();
                if let Some(cap) = cap
                    && let Some(why) = cap_refusal(self.figures.allocated, request, cap)
                {
                    self.say(why);
                    return Vec::new();
                }
                run.pending = names.clone();
                StressCommand::Malloc {
                    sizes: vec![*size; names.len()],
                    cap,
                }
            }
            ScenarioAction::Free { patterns } => {
                let held: Vec<String> = run.names.iter().map(|(n, _)| n.clone()).collect();
                let mut gone = std::collections::BTreeSet::new();
                for p in patterns {
                    gone.extend(scenario::format::matching(p, &held).into_iter().cloned());
                }
                let ids: rustc_hash::FxHashSet<u64> = run
                    .names
                    .iter()
                    .filter(|(n, _)| gone.contains(n))
                    .map(|&(_, id)| id)
                    .collect();
                run.names.retain(|(n, _)| !gone.contains(n));
                let addresses = self
                    .tensors
                    .iter()
                    .filter(|t| ids.contains(&t.id))
                    .map(|t| t.address)
                    .collect();
                StressCommand::Free { addresses }
            }
            ScenarioAction::EmptyCache => StressCommand::EmptyCache,
        };
        run.cursor = at + 1;
        run.done += 1;
        run.in_flight = true;
        run.stopped = None;
        self.send(command)
    }

    /// Records what the answer to a scenario step did: the new tensors get
    /// their names; an OOM or a failure stops the run and is kept, so the
    /// panel says the step failed rather than that the run finished.
    pub(super) fn scenario_answer(
        &mut self,
        first_id: u64,
        stop: Option<ScenarioStop>,
        reconfigured: bool,
    ) {
        let next_id = self.next_id;
        let Some(run) = &mut self.scenario else {
            return;
        };
        if reconfigured {
            run.names.clear();
        }
        if !run.in_flight {
            return;
        }
        run.in_flight = false;
        let pending = std::mem::take(&mut run.pending);
        run.names.extend(pending.into_iter().zip(first_id..next_id));
        if stop.is_some() {
            run.running = false;
        }
        run.stopped = stop;
    }
}
