//! Whose memory is it: the live allocated blocks of a snapshot (its final
//! segments, or the scrub state at any cursor) grouped by allocation site.
//!
//! A block's site comes from the stack PyTorch recorded when it was
//! allocated (innermost frame first). Frames that carry no information are
//! dropped the way `torch/cuda/_memory_viz.py` drops them (its frame
//! filter: the unwinder, the interpreter's evaluation loop, the
//! dispatcher's boxing and registration frames). What is left is grouped by
//! one of the [`Grouping`] modes; the default is the innermost frame of the
//! user's own code (a Python frame outside torch's package and the standard
//! library). Blocks without a stack form one group that says why.
//!
//! The sites' bytes add up to the allocated bytes of the input: every
//! allocated block is in exactly one site. Pure: no I/O.

use std::sync::{Arc, LazyLock};

use memchr::memmem::Finder;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::scrub::{LiveBlock, ScrubState};
use super::types::{Frame, Frames, Snapshot, TraceEntry};
use crate::alloc::{BlockState, TraceAction};

/// How blocks are grouped into sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grouping {
    /// The innermost Python frame outside torch's package and the standard
    /// library (falls back to the innermost Python frame, then to the
    /// innermost informative frame).
    #[default]
    UserFrame,
    /// The innermost Python frame, torch's own included.
    PythonFrame,
    /// The innermost informative frame that has a source line, C++ included.
    FileLine,
    /// The function (file and name) of the user frame, every line merged.
    Function,
    /// The whole informative stack.
    Stack,
}

impl Grouping {
    pub const ALL: [Grouping; 5] = [
        Grouping::UserFrame,
        Grouping::PythonFrame,
        Grouping::FileLine,
        Grouping::Function,
        Grouping::Stack,
    ];

    /// The name shown in the viewer and accepted on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Grouping::UserFrame => "user frame",
            Grouping::PythonFrame => "python frame",
            Grouping::FileLine => "file:line",
            Grouping::Function => "function",
            Grouping::Stack => "whole stack",
        }
    }

    /// The next mode (wraps).
    pub fn next(self) -> Grouping {
        let i = Grouping::ALL.iter().position(|&g| g == self).unwrap_or(0);
        Grouping::ALL[(i + 1) % Grouping::ALL.len()]
    }
}

/// Why a group of blocks has no stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoStackReason {
    /// The file records stacks, but these blocks were allocated while
    /// `_record_memory_history` was not recording them: before it was
    /// called (typically weights and optimizer state, when a script turns
    /// it on after building its model) or while it was off. Worded without
    /// "before": a probe that turns history on at launch can still miss
    /// blocks (a torch it cannot hook, a script that turns history off).
    BeforeRecording,
    /// The file records no stacks at all (history off, or recorded with
    /// `stacks` disabled).
    WithoutStacks,
    /// Only the final state was read, and none of its blocks has a stack:
    /// the trace would say which of the two above it is.
    TraceNotRead,
    /// The file records stacks and its trace starts mid-run (blocks were
    /// live at its first event): a block without a stack at a moment of
    /// the trace was allocated before the trace's first event, before
    /// `_record_memory_history` began or in events the ring buffer
    /// (`max_entries`) no longer holds; the file does not say which.
    BeforeTrace,
}

impl NoStackReason {
    pub fn describe(self) -> &'static str {
        match self {
            NoStackReason::BeforeRecording => "no stack: allocated while history was off",
            NoStackReason::WithoutStacks => "no stack: recorded without stacks",
            NoStackReason::TraceNotRead => "no stack in the final state (trace not read)",
            NoStackReason::BeforeTrace => "no stack: allocated before the trace began",
        }
    }

    /// What the group means, for a legend under a list of sites (the
    /// summary's; its JSON's `no_stack_legend`): [`NoStackReason::short`]
    /// names the case, this says what it is. Each fits 80 columns after
    /// "  no stack, ", the case and ": ".
    pub fn meaning(self) -> &'static str {
        match self {
            NoStackReason::BeforeRecording => "allocated before recording began, or while paused",
            NoStackReason::WithoutStacks => "record with _record_memory_history(stacks=\"python\")",
            NoStackReason::TraceNotRead => "the final state has none; the trace would say why",
            NoStackReason::BeforeTrace => "allocated in events the file does not hold",
        }
    }

    /// The case in a few words, as [`NoStackReason::describe`] ends.
    pub fn short(self) -> &'static str {
        match self {
            NoStackReason::BeforeRecording => "history was off",
            NoStackReason::WithoutStacks => "without stacks",
            NoStackReason::TraceNotRead => "trace not read",
            NoStackReason::BeforeTrace => "before the trace began",
        }
    }

    /// The reason for the blocks of a state of a trace that starts with
    /// blocks live (`starts_mid_run`): those may have been allocated
    /// after the recording began, in events the trace no longer holds.
    pub fn within_trace(self, starts_mid_run: bool) -> NoStackReason {
        match self {
            NoStackReason::BeforeRecording if starts_mid_run => NoStackReason::BeforeTrace,
            other => other,
        }
    }
}

/// What a site is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKey {
    /// One frame (user frame, Python frame and file:line groupings).
    Frame(Frame),
    /// One function, every line of it.
    Function {
        #[serde(serialize_with = "ser_arc_str")]
        filename: Arc<str>,
        #[serde(serialize_with = "ser_arc_str")]
        name: Arc<str>,
    },
    /// A whole stack of informative frames, innermost first.
    Stack(Vec<Frame>),
    NoStack(NoStackReason),
}

fn ser_arc_str<S: serde::Serializer>(v: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

/// The last path component (either separator), as `_memory_viz.py` shows
/// file names.
pub fn short_file(filename: &str) -> &str {
    filename.rsplit(['/', '\\']).next().unwrap_or(filename)
}

/// `file:line` (line `?` when unknown: PyTorch writes 0 for C++ frames
/// without line information and 2^64−1, read as −1, for unknown lines).
pub fn file_line(f: &Frame) -> String {
    format!("{}:{}", shown_file(short_file(&f.filename)), f.shown_line())
}

/// A frame's file as shown: `??` when none is recorded, as PyTorch writes
/// most C++ frames (others it leaves empty).
pub fn shown_file(filename: &str) -> &str {
    if filename.is_empty() { "??" } else { filename }
}

/// A C++ function name without its return type and parameter list
/// (`at::TensorBase at::detail::empty<long>(c10::ArrayRef<long>)` →
/// `at::detail::empty<long>`); `(anonymous namespace)` becomes `{anon}`.
pub fn short_function(name: &str) -> String {
    let name = name.replace("(anonymous namespace)", "{anon}");
    let head = name.split('(').next().unwrap_or(&name).trim();
    // The return type, if any, ends at the last space outside template
    // brackets; a scan from the right finds it.
    let mut depth = 0i32;
    for (i, c) in head.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => depth -= 1,
            ' ' if depth == 0 => return head.get(i + 1..).unwrap_or(head).to_string(),
            _ => {}
        }
    }
    if head.is_empty() {
        name
    } else {
        head.to_string()
    }
}

/// One line naming a frame: `file:line function` for Python, the short
/// function name (and file when known) for C++.
pub fn frame_label(f: &Frame) -> String {
    if is_python(f) {
        return format!("{} {}", file_line(f), f.name);
    }
    let name = cpp_name(&f.name);
    let backward = backward_note(&name);
    if has_no_file(&f.filename) {
        format!("{name} (C++{backward})")
    } else {
        format!("{name} ({}{backward})", file_line(f))
    }
}

/// What a site label adds to a C++ function's place where the function
/// is an autograd node's `apply` (`DivBackward0::apply`,
/// `MaxPool2DWithIndicesBackward0::apply`): ", backward pass". The
/// autograd engine runs these on its own thread in `backward()`, which
/// records no Python frame, so without it a site that holds most of a
/// peak named no code of the user's and said nothing of where it ran.
/// Empty for any other function. `name` is as [`cpp_name`] has it.
fn backward_note(name: &str) -> &'static str {
    if is_autograd_backward_node(name) {
        ", backward pass"
    } else {
        ""
    }
}

/// Whether a C++ function (as [`cpp_name`] has it) is the `apply` of a
/// generated autograd node: its class ends in `Backward` and the digits
/// of its version (`DivBackward0`, `CudnnConvolutionBackward`).
fn is_autograd_backward_node(name: &str) -> bool {
    let Some(class) = name.strip_suffix("::apply") else {
        return false;
    };
    let class = class.rsplit("::").next().unwrap_or(class);
    let stem = class.trim_end_matches(|c: char| c.is_ascii_digit());
    stem.len() > "Backward".len() && stem.ends_with("Backward")
}

/// A C++ function as site labels name it: [`short_function`], without the
/// namespace autograd nodes are generated into
/// (`torch::autograd::generated::DivBackward0::apply(…)` →
/// `DivBackward0::apply`).
fn cpp_name(name: &str) -> String {
    let short = short_function(name);
    match short.strip_prefix("torch::autograd::generated::") {
        Some(rest) => rest.to_string(),
        None => short,
    }
}

/// Whether a frame's file is unknown: empty, or `??` as PyTorch writes
/// C++ frames without debug information.
fn has_no_file(filename: &str) -> bool {
    matches!(short_file(filename), "" | "??")
}

/// The user's frames that called the frame at `site` of `stack` (those
/// after it, innermost first), or the Python frames when there are none.
pub fn callers<'a>(stack: &'a [Frame], site: &Frame) -> Vec<&'a Frame> {
    callers_by(stack, site, is_user)
}

/// [`callers`], with `user` telling user frames (a cached [`is_user`]).
fn callers_by<'a>(
    stack: &'a [Frame],
    site: &Frame,
    mut user: impl FnMut(&Frame) -> bool,
) -> Vec<&'a Frame> {
    let after = stack
        .iter()
        .position(|f| f == site)
        .map_or(&stack[..0], |i| &stack[i + 1..]);
    let user: Vec<&Frame> = after.iter().filter(|f| user(f)).collect();
    if !user.is_empty() {
        return user;
    }
    informative(after).filter(|f| is_python(f)).collect()
}

/// The frame a whole stack is named after, as the user-frame grouping
/// names a stack: every stack starts in the allocator, so its first frame
/// would give every C++-only stack the same name.
fn stack_head(frames: &[Frame]) -> Option<&Frame> {
    stack_head_with(frames, &mut UserFrames::default())
}

/// [`stack_head`], asking `users` whether a frame is the user's.
fn stack_head_with<'f>(frames: &'f [Frame], users: &mut UserFrames) -> Option<&'f Frame> {
    frames
        .iter()
        .find(|f| users.is_user(f))
        .or_else(|| innermost_python(frames))
        .or_else(|| innermost_cpp(frames))
        .or(frames.first())
}

/// How much of a frame a short site label names (see [`ShortLabel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Brevity {
    /// Python: `file:line`; C++: the function's own name.
    Shortest,
    /// Python: `file:line function`; C++: the function and the class (or
    /// namespace) it is in.
    Short,
    /// [`frame_label`].
    Full,
}

/// `frame` in the fewest characters `brevity` allows. C++ names lose
/// their template arguments first: they are most of a long name
/// (`at::detail::_empty_strided_generic<c10::ArrayRef<long> >`) and what
/// tells two frames apart is rarely in them.
fn brief_frame_label(frame: &Frame, brevity: Brevity) -> String {
    let components = match brevity {
        Brevity::Full => return frame_label(frame),
        _ if is_python(frame) => {
            return match brevity {
                Brevity::Shortest => file_line(frame),
                _ => frame_label(frame),
            };
        }
        Brevity::Shortest => 1,
        Brevity::Short => 2,
    };
    let name = short_function(&frame.name);
    let bare = without_template_arguments(&name);
    let kept: Vec<&str> = bare
        .split("::")
        .filter(|c| !c.is_empty() && *c != "{anon}")
        .collect();
    let from = kept.len().saturating_sub(components);
    match kept.get(from..) {
        Some(tail) if !tail.is_empty() => tail.join("::"),
        _ => name,
    }
}

/// `name` without its `<…>` template arguments; `name` itself when its
/// brackets do not pair (an `operator<`).
fn without_template_arguments(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' => depth = depth.saturating_add(1),
            '>' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return name.to_string(),
            },
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    if depth == 0 && !out.is_empty() {
        out
    } else {
        name.to_string()
    }
}

impl SiteKey {
    /// The frame a site is named after, when it is one frame.
    pub fn frame(&self) -> Option<&Frame> {
        match self {
            SiteKey::Frame(f) => Some(f),
            SiteKey::Stack(frames) => frames.first(),
            _ => None,
        }
    }

    /// One line naming the site.
    pub fn label(&self) -> String {
        match self {
            SiteKey::Frame(f) => frame_label(f),
            // A C++ function is named as the other groupings name its
            // frame, not by its whole signature.
            SiteKey::Function { filename, name } if !is_python_file(filename) => {
                let name = cpp_name(name);
                let backward = backward_note(&name);
                if has_no_file(filename) {
                    format!("{name} (C++{backward})")
                } else {
                    format!("{name} ({}{backward})", short_file(filename))
                }
            }
            SiteKey::Function { filename, name } => {
                format!("{} ({})", name, short_file(filename))
            }
            SiteKey::Stack(frames) => match stack_head(frames) {
                Some(f) => format!("{} (stack of {} frames)", frame_label(f), frames.len()),
                None => "(empty stack)".to_string(),
            },
            SiteKey::NoStack(reason) => reason.describe().to_string(),
        }
    }

    pub fn is_no_stack(&self) -> bool {
        matches!(self, SiteKey::NoStack(_))
    }

    /// Whether `other` is the same site: equal, or both the blocks without
    /// a stack (whose reason the trace may settle once it is read).
    pub fn same_site(&self, other: &SiteKey) -> bool {
        self == other || (self.is_no_stack() && other.is_no_stack())
    }
}

/// Function names `_memory_viz.py` omits (substring match).
const NOISE_FUNCTIONS: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

/// File names `_memory_viz.py` omits (substring match).
const NOISE_FILES: [&str; 10] = [
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// One SIMD substring finder per pattern (memchr's `memmem`): the grouping
/// tests every frame of every distinct stack, and the names are long
/// demangled C++ signatures. An Aho-Corasick automaton over each list took
/// about 6,000 instructions a frame (its prefilter keys on bytes such as
/// `_` that every such name has); the finders skip most of a name at once.
static NOISE_FUNCTION_FINDERS: LazyLock<Vec<Finder<'static>>> =
    LazyLock::new(|| NOISE_FUNCTIONS.iter().map(Finder::new).collect());
static NOISE_FILE_FINDERS: LazyLock<Vec<Finder<'static>>> =
    LazyLock::new(|| NOISE_FILES.iter().map(Finder::new).collect());

fn matches_any(finders: &[Finder<'static>], text: &str) -> bool {
    finders.iter().any(|f| f.find(text.as_bytes()).is_some())
}

/// A frame that carries no information (unwinder, interpreter, dispatcher,
/// the launcher that ran the script).
pub fn is_noise(f: &Frame) -> bool {
    matches_any(&NOISE_FUNCTION_FINDERS, &f.name)
        || matches_any(&NOISE_FILE_FINDERS, &f.filename)
        || is_launcher(f)
}

/// A frame of what ran the script, outermost in every stack of a process
/// started as `python -m vramtop_probe train.py` (or `python -m module`):
/// runpy (frozen from Python 3.11, `lib/python3.X/runpy.py` before) and
/// the probe's own `__main__`. Not the user's code: the script's frames
/// are the sites and callers.
fn is_launcher(f: &Frame) -> bool {
    let p = &*f.filename;
    p == "<frozen runpy>"
        || p.ends_with("/vramtop_probe/__main__.py")
        || (p.ends_with("/runpy.py") && is_stdlib(f))
}

/// A Python source frame (`.py`, or generated code such as `<string>`).
pub fn is_python(f: &Frame) -> bool {
    is_python_file(&f.filename)
}

/// Whether `filename` is a Python frame's: a `.py` file, or a `<…>` one
/// (`<frozen runpy>`, `<string>`).
fn is_python_file(filename: &str) -> bool {
    filename.ends_with(".py") || (filename.starts_with('<') && filename.ends_with('>'))
}

/// A frame of torch's own package (Linux, macOS or Windows paths).
pub fn is_torch(f: &Frame) -> bool {
    let p = &*f.filename;
    p.contains("/torch/") || p.contains("\\torch\\") || p.starts_with("torch/")
}

/// A frame of Python's standard library: under `lib/python3.X/` (or
/// Windows' `Lib\`) but not in an installed package, or a frozen module.
pub fn is_stdlib(f: &Frame) -> bool {
    let p = &*f.filename;
    if p.starts_with("<frozen") {
        return true;
    }
    let installed = p.contains("site-packages") || p.contains("dist-packages");
    let stdlib_dir = p.contains("/lib/python") || p.contains("\\Lib\\");
    stdlib_dir && !installed
}

/// A frame of the user's own code: Python, outside torch and the stdlib.
pub fn is_user(f: &Frame) -> bool {
    is_python(f) && !is_torch(f) && !is_stdlib(f) && !is_noise(f)
}

/// The informative frames of a stack, innermost first.
pub fn informative(frames: &[Frame]) -> impl Iterator<Item = &Frame> {
    frames.iter().filter(|f| !is_noise(f))
}

/// A frame a stack listing shows: informative and not the caching
/// allocator's own (every stack starts there).
pub fn is_listed(f: &Frame) -> bool {
    !is_noise(f) && !is_allocator(f)
}

/// How the frames of one stack are counted wherever a stack is shown (the
/// sites pane, the block detail, `open --summary --json`): every frame is
/// in exactly one of the three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FrameCounts {
    /// Python frames (listed first).
    pub python: usize,
    /// C++ frames that carry information, the allocator's own excepted:
    /// hidden while Python frames are listed (`x` lists them in the sites
    /// pane).
    pub cpp: usize,
    /// Frames never listed: the unwinder, the interpreter, the
    /// dispatcher's boxing and registration, the caching allocator, the
    /// launcher.
    pub dropped: usize,
    /// Of the dropped frames, the launcher's (runpy, the probe's
    /// `__main__`): what ran the script, not the allocator's plumbing.
    pub launcher: usize,
}

/// Which of the [`FrameCounts`] a frame is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameClass {
    Python,
    Cpp,
    Dropped,
    /// Dropped too, counted apart ([`FrameCounts::launcher`]).
    Launcher,
}

fn frame_class(f: &Frame) -> FrameClass {
    if is_launcher(f) {
        FrameClass::Launcher
    } else if !is_listed(f) {
        FrameClass::Dropped
    } else if is_python(f) {
        FrameClass::Python
    } else {
        FrameClass::Cpp
    }
}

fn count_classes(classes: impl Iterator<Item = FrameClass>) -> FrameCounts {
    let mut counts = FrameCounts::default();
    for class in classes {
        match class {
            FrameClass::Python => counts.python += 1,
            FrameClass::Cpp => counts.cpp += 1,
            FrameClass::Dropped => counts.dropped += 1,
            FrameClass::Launcher => {
                counts.dropped += 1;
                counts.launcher += 1;
            }
        }
    }
    counts
}

/// The [`FrameCounts`] of a stack.
pub fn frame_counts(frames: &[Frame]) -> FrameCounts {
    count_classes(frames.iter().map(frame_class))
}

/// Frame classes by the frame's strings. A file's frames share their
/// strings (the reader interns them), and the stacks of a site list share
/// most of their frames: classifying (a substring search of the name and
/// the file name) once per distinct frame was a few percent of
/// `open --summary`.
#[derive(Default)]
struct FrameClasses(FxHashMap<(usize, usize), FrameClass>);

impl FrameClasses {
    fn counts(&mut self, frames: &[Frame]) -> FrameCounts {
        count_classes(frames.iter().map(|f| {
            // Keyed by the addresses of the strings, alive while the stack
            // is borrowed; equal addresses are equal strings.
            let key = (
                Arc::as_ptr(&f.name).cast::<u8>() as usize,
                Arc::as_ptr(&f.filename).cast::<u8>() as usize,
            );
            *self.0.entry(key).or_insert_with(|| frame_class(f))
        }))
    }
}

/// The number of C++ frames of a stack that a listing can show (the
/// informative ones outside the allocator; [`FrameCounts::cpp`]).
pub fn cpp_frames(frames: &[Frame]) -> usize {
    frame_counts(frames).cpp
}

/// The frames a stack listing shows, innermost first: the Python ones, or
/// every listed frame when `with_cpp` or when there is no Python frame
/// (and every frame when none is listed at all).
pub fn listed_frames(frames: &[Frame], with_cpp: bool) -> Vec<&Frame> {
    let listed: Vec<&Frame> = frames.iter().filter(|f| is_listed(f)).collect();
    if listed.is_empty() {
        return frames.iter().collect();
    }
    if with_cpp || !listed.iter().any(|f| is_python(f)) {
        return listed;
    }
    listed.into_iter().filter(|f| is_python(f)).collect()
}

/// The frames worth showing first: the user's frames, or when there are
/// none the Python frames, or else the informative ones outside the
/// allocator; innermost first.
pub fn user_facing(frames: &[Frame]) -> Vec<&Frame> {
    let user: Vec<&Frame> = frames.iter().filter(|f| is_user(f)).collect();
    if !user.is_empty() {
        return user;
    }
    let python: Vec<&Frame> = informative(frames).filter(|f| is_python(f)).collect();
    if !python.is_empty() {
        return python;
    }
    let cpp: Vec<&Frame> = informative(frames).filter(|f| !is_allocator(f)).collect();
    if cpp.is_empty() {
        informative(frames).collect()
    } else {
        cpp
    }
}

/// A frame of the caching allocator itself (every stack starts there).
pub fn is_allocator(f: &Frame) -> bool {
    f.name.contains("CachingAllocator") || f.filename.contains("CachingAllocator")
}

/// A C++ frame of tensor-creation and dispatch plumbing (`empty_cuda`,
/// `at::_ops::…::call`, kernel wrappers) that every op passes through.
pub fn is_plumbing(f: &Frame) -> bool {
    let name = short_function(&f.name);
    name.contains("empty")
        || name.starts_with("c10::impl::")
        || name.starts_with("at::_ops::")
        || name.contains("create_out")
        || name.contains("wrapper_")
        || name.contains("set_output")
}

/// The innermost frame naming a C++-only stack (the autograd engine's
/// threads record no Python frame): the autograd node when there is one
/// (`BmmBackward0::apply`), else the first frame outside the allocator and
/// the dispatch plumbing.
/// A frame of CPython's own C source (`…/python-3.12.3/Objects/descrobject.c`
/// `method_vectorcall_VARARGS_KEYWORDS`): the interpreter calling into an
/// extension. It has a source line, unlike torch's C++ frames, so a
/// `file:line` site would stop there and merge every Python line that
/// calls the same kind of method. Its source folders are CPython's:
/// `Objects`, `Python`, `Include`, `Modules`, `Parser`.
pub fn is_interpreter(f: &Frame) -> bool {
    let p = &*f.filename;
    let c_source = p.ends_with(".c") || p.ends_with(".h");
    c_source
        && ["Objects/", "Python/", "Include/", "Modules/", "Parser/"]
            .iter()
            .any(|dir| {
                p.match_indices(dir)
                    .any(|(at, _)| at == 0 || p[..at].ends_with('/'))
            })
}

/// A thread's entry point (libstdc++'s `execute_native_thread_routine`,
/// glibc's `start_thread` and `clone`): the outermost frames of every
/// stack of a C++ thread, such as autograd's backward threads. Often the
/// only frames of such a stack with a source line, so a `file:line` site
/// there would put every backward allocation in one group.
pub fn is_thread_entry(f: &Frame) -> bool {
    matches!(
        short_function(&f.name).as_str(),
        "execute_native_thread_routine" | "start_thread" | "clone" | "__clone" | "__clone3"
    ) || f.filename.contains("libstdc++-v3/src/")
}

fn innermost_cpp(frames: &[Frame]) -> Option<&Frame> {
    informative(frames)
        .find(|f| f.name.contains("Backward") && f.name.contains("::apply"))
        .or_else(|| informative(frames).find(|f| !is_allocator(f) && !is_plumbing(f)))
        .or_else(|| informative(frames).find(|f| !is_allocator(f)))
        .or_else(|| informative(frames).next())
}

fn innermost_python(frames: &[Frame]) -> Option<&Frame> {
    informative(frames).find(|f| is_python(f))
}

/// [`is_user`] once per distinct Python frame: the stacks of a snapshot
/// share their frames' strings, and telling torch's, the standard
/// library's and the launcher's frames from the user's takes several
/// searches of each. Keyed by the addresses of the frame's name and file
/// name, all [`is_user`] reads.
#[derive(Default)]
pub(crate) struct UserFrames(FxHashMap<(usize, usize), bool>);

impl UserFrames {
    pub(crate) fn is_user(&mut self, f: &Frame) -> bool {
        // A C++ frame is told by its file name's end: cheaper than a look-up.
        if !is_python(f) {
            return false;
        }
        let key = (
            Arc::as_ptr(&f.name).cast::<u8>() as usize,
            Arc::as_ptr(&f.filename).cast::<u8>() as usize,
        );
        *self.0.entry(key).or_insert_with(|| is_user(f))
    }
}

/// The site of one stack (`None`: the stack is empty).
pub fn site_key(frames: &[Frame], grouping: Grouping) -> Option<SiteKey> {
    site_key_with(frames, grouping, &mut UserFrames::default())
}

/// [`site_key`], asking `users` whether a frame is the user's.
fn site_key_with(frames: &[Frame], grouping: Grouping, users: &mut UserFrames) -> Option<SiteKey> {
    if frames.is_empty() {
        return None;
    }
    let mut user_or_fallback = || stack_head_with(frames, users);
    match grouping {
        Grouping::UserFrame => user_or_fallback().cloned().map(SiteKey::Frame),
        Grouping::PythonFrame => innermost_python(frames)
            .or_else(|| innermost_cpp(frames))
            .or(frames.first())
            .cloned()
            .map(SiteKey::Frame),
        Grouping::FileLine => informative(frames)
            .find(|f| {
                f.known_line().is_some_and(|line| line > 0)
                    && !f.filename.is_empty()
                    && &*f.filename != "??"
                    && !is_allocator(f)
                    && !is_thread_entry(f)
                    && !is_interpreter(f)
            })
            .or_else(user_or_fallback)
            .cloned()
            .map(SiteKey::Frame),
        Grouping::Function => user_or_fallback().map(|f| SiteKey::Function {
            filename: Arc::clone(&f.filename),
            name: Arc::clone(&f.name),
        }),
        Grouping::Stack => {
            let kept: Vec<Frame> = informative(frames).cloned().collect();
            if kept.is_empty() {
                Some(SiteKey::Stack(frames.to_vec()))
            } else {
                Some(SiteKey::Stack(kept))
            }
        }
    }
}

/// One allocated block, as the grouping sees it.
#[derive(Debug, Clone, Copy)]
pub struct LiveAllocation<'a> {
    pub address: u64,
    /// Block size (bytes).
    pub size: u64,
    /// Requested size (bytes).
    pub requested_size: u64,
    pub frames: &'a Frames,
    /// The trace no longer holds this block's stack (see
    /// [`LiveBlock::stack_lost`]): without frames it is
    /// [`NoStackReason::BeforeTrace`] where the file records stacks.
    pub stack_lost: bool,
}

/// One allocation site and the live blocks allocated there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Site {
    pub key: SiteKey,
    pub label: String,
    /// Σ block sizes (bytes).
    pub bytes: u64,
    /// Σ requested sizes (bytes).
    pub requested_bytes: u64,
    pub blocks: u64,
    /// bytes / allocated bytes (0…=1; 0 when nothing is allocated).
    pub share: f64,
    /// A full stack of the site, innermost first: the largest block's
    /// among the blocks reached through [`Site::called_from`].
    #[serde(skip)]
    pub stack: Frames,
    /// How the site was reached: the callers (user frames, else Python
    /// ones) after the site's frame in [`Site::stack`], innermost first,
    /// as labels. Of the caller paths the site's blocks came through, the
    /// one that holds the most bytes: a site reached from three places
    /// is said through the one that holds most of it, not through the one
    /// that happens to have the largest block.
    pub called_from: Vec<String>,
    /// Bytes of the blocks reached through [`Site::called_from`] (block
    /// sizes; ≤ [`Site::bytes`]).
    pub called_from_bytes: u64,
    /// Distinct caller paths the site's blocks came through (1 when all
    /// came the same way; 0 for a site without a frame).
    pub caller_paths: usize,
    /// C++ frames of [`Site::stack`] a listing can show (hidden while its
    /// Python frames are listed; [`FrameCounts::cpp`]).
    pub cpp_frames: usize,
    /// Python frames of [`Site::stack`].
    pub python_frames: usize,
    /// Frames of [`Site::stack`] never listed (unwinder, interpreter,
    /// dispatcher, allocator); python + cpp + dropped = the stack's length.
    pub dropped_frames: usize,
    /// The blocks' addresses, ascending.
    #[serde(skip)]
    pub addresses: Vec<u64>,
    /// The largest block's size (bytes), which gave [`Site::stack`].
    #[serde(skip)]
    largest: u64,
    /// The frames the label gained to tell a whole stack from others
    /// named alike (see `distinguish_stack_labels`), in the label's order.
    #[serde(skip)]
    parting: Vec<Frame>,
    /// The label in short, for a pane too narrow for it; only a whole
    /// stack's label that gained frames has one.
    #[serde(skip)]
    short_label: Option<ShortLabel>,
}

/// A whole-stack label in short: the label of a stack named alike to
/// others keeps the frames that tell them apart at its end
/// (`_backends.py:288 einsum … model.py:397 forward …
/// at::detail::_empty_strided_generic<c10::ArrayRef<long> > (C++) (stack
/// of 70 frames)`), where a narrow pane cuts first. The short label names
/// the head by its function and each parting frame in as few characters
/// as still tell the stacks named alike apart (`einsum … model.py:397 …
/// _empty_strided_generic`).
#[derive(Debug, Clone, PartialEq)]
struct ShortLabel {
    /// The function the stack is named after (`einsum`).
    head: String,
    /// Each parting frame, short, in the label's order.
    parting: Vec<String>,
}

/// What joins the parts of a whole-stack label.
const LABEL_PARTS_JOINT: &str = " … ";

/// `parts` joined by [`LABEL_PARTS_JOINT`] in about `width` characters:
/// the shorter parts whole, the room left shared evenly by the longer
/// ones, each cut in its middle to its share. No part is cut below three
/// characters ("a…b"), so very narrow widths get a longer line, which the
/// pane cuts at its end.
fn fit_parts(parts: &[String], width: usize) -> String {
    let lengths: Vec<usize> = parts.iter().map(|p| p.chars().count()).collect();
    let joints = LABEL_PARTS_JOINT
        .chars()
        .count()
        .saturating_mul(parts.len().saturating_sub(1));
    let mut room = width.saturating_sub(joints);
    // Water-filling: parts shorter than an even share of what is left keep
    // their length; the rest share what the short ones leave.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut shares = vec![0usize; parts.len()];
    for (k, &i) in order.iter().enumerate() {
        let sharing = parts.len() - k;
        let share = room / sharing;
        shares[i] = lengths[i].min(share).max(3);
        room = room.saturating_sub(shares[i]);
    }
    parts
        .iter()
        .zip(lengths.iter().zip(&shares))
        .map(|(part, (&length, &share))| {
            if length <= share {
                return part.clone();
            }
            // One character goes to the "…".
            let kept = share - 1;
            let start = kept.div_ceil(2);
            let end = kept - start;
            let head: String = part.chars().take(start).collect();
            let tail: String = part.chars().skip(length - end).collect();
            format!("{head}…{tail}")
        })
        .collect::<Vec<_>>()
        .join(LABEL_PARTS_JOINT)
}

impl Site {
    /// The label in at most `width` characters where it can be made so
    /// without reading like another site's: the label, else without its
    /// frame count, else its short form, else the short form with its
    /// head (the part the sites named alike share) cut, else its parting
    /// frames alone, each cut in its middle. A label without a short form
    /// comes without its frame count: the pane cuts its end.
    pub fn label_within(&self, width: usize) -> String {
        let fits = |text: &str| text.chars().count() <= width;
        if fits(&self.label) {
            return self.label.clone();
        }
        // The frame count goes whole before any of the name does: a label
        // cut inside it ("custom_softmax (stack of 2…") read as a count of
        // 2, and one cut inside the name lost what the count only adds to.
        let uncounted = match self.key {
            SiteKey::Stack(_) => self
                .label
                .rsplit_once(" (stack of ")
                .map_or(self.label.as_str(), |(head, _)| head),
            _ => self.label.as_str(),
        };
        let Some(short) = &self.short_label else {
            return uncounted.to_string();
        };
        if fits(uncounted) {
            return uncounted.to_string();
        }
        let parting = short.parting.join(LABEL_PARTS_JOINT);
        let whole = format!("{}{LABEL_PARTS_JOINT}{parting}", short.head);
        if fits(&whole) {
            return whole;
        }
        // Characters left for the head beside the parting frames; under
        // six the head would be "…" and a scrap of a name ("…sum"): it
        // goes. Its end is kept: a line number, or the end of a long
        // function name.
        let head_room = width
            .checked_sub(LABEL_PARTS_JOINT.chars().count())
            .and_then(|w| w.checked_sub(parting.chars().count()))
            .filter(|&room| room >= 6);
        match head_room {
            Some(room) => {
                let head_chars = short.head.chars().count();
                let head: String = short
                    .head
                    .chars()
                    .skip(head_chars.saturating_sub(room - 1))
                    .collect();
                format!("…{head}{LABEL_PARTS_JOINT}{parting}")
            }
            // Still too long: each parting frame too long for an even
            // share of the row is cut in its middle, which keeps a Python
            // frame's line number and a C++ name's class and function.
            None => format!("… {}", fit_parts(&short.parting, width.saturating_sub(2))),
        }
    }
}

/// The live allocated memory by site, largest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sites {
    pub grouping: Grouping,
    /// Σ sizes of the allocated blocks grouped (bytes) = Σ site bytes.
    pub allocated: u64,
    pub sites: Vec<Site>,
}

impl Sites {
    /// The site holding the block at `address`, if any.
    pub fn site_of(&self, address: u64) -> Option<usize> {
        self.sites
            .iter()
            .position(|s| s.addresses.binary_search(&address).is_ok())
    }

    /// The bytes of the no-stack group (0 when every block has a stack).
    pub fn no_stack_bytes(&self) -> u64 {
        self.sites
            .iter()
            .filter(|s| s.key.is_no_stack())
            .map(|s| s.bytes)
            .sum()
    }
}

/// Groups `blocks` by site; blocks without a stack go to one group
/// labelled with `no_stack`, or with it [`NoStackReason::within_trace`]
/// for those whose stack the trace lost.
pub fn group<'a>(
    blocks: impl IntoIterator<Item = LiveAllocation<'a>>,
    grouping: Grouping,
    no_stack: NoStackReason,
) -> Sites {
    let mut index: FxHashMap<SiteKey, usize> = FxHashMap::default();
    // Stacks are interned (one Arc per distinct stack), so a stack's key is
    // computed once; keyed by the slice's address and length.
    // With whether the stack was lost: an empty list the file recorded and
    // one the trace no longer holds are two sites however they are stored.
    let mut by_stack: FxHashMap<(usize, usize, bool), usize> = FxHashMap::default();
    let mut users = UserFrames::default();
    let mut sites: Vec<Site> = Vec::new();
    // Bytes and largest block per distinct stack, to find each site's
    // main caller path afterwards; in the order first met (blocks come by
    // address), so that ties go the same way every run, not by where the
    // stacks happen to be in memory.
    let mut stack_tally: FxHashMap<(usize, usize, bool), usize> = FxHashMap::default();
    let mut stacks: Vec<StackTally> = Vec::new();
    let mut allocated = 0u64;
    for b in blocks {
        allocated = allocated.saturating_add(b.size);
        let stack_id = (
            Arc::as_ptr(b.frames).cast::<Frame>() as usize,
            b.frames.len(),
            b.stack_lost,
        );
        let at = match by_stack.get(&stack_id) {
            Some(&i) => i,
            None => {
                let reason = no_stack.within_trace(b.stack_lost);
                let key = site_key_with(b.frames, grouping, &mut users)
                    .unwrap_or(SiteKey::NoStack(reason));
                let i = *index.entry(key.clone()).or_insert_with(|| {
                    sites.push(Site {
                        label: key.label(),
                        key,
                        bytes: 0,
                        requested_bytes: 0,
                        blocks: 0,
                        share: 0.0,
                        stack: Arc::clone(b.frames),
                        called_from: Vec::new(),
                        called_from_bytes: 0,
                        caller_paths: 0,
                        cpp_frames: 0,
                        python_frames: 0,
                        dropped_frames: 0,
                        addresses: Vec::new(),
                        largest: 0,
                        parting: Vec::new(),
                        short_label: None,
                    });
                    sites.len() - 1
                });
                by_stack.insert(stack_id, i);
                i
            }
        };
        let Some(site) = sites.get_mut(at) else {
            continue;
        };
        site.bytes = site.bytes.saturating_add(b.size);
        site.requested_bytes = site.requested_bytes.saturating_add(b.requested_size);
        site.blocks += 1;
        site.addresses.push(b.address);
        let t = *stack_tally.entry(stack_id).or_insert_with(|| {
            stacks.push(StackTally {
                site: at,
                bytes: 0,
                largest: 0,
                stack: Arc::clone(b.frames),
            });
            stacks.len() - 1
        });
        if let Some(tally) = stacks.get_mut(t) {
            tally.bytes = tally.bytes.saturating_add(b.size);
            tally.largest = tally.largest.max(b.size);
        }
    }
    settle_caller_paths(&mut sites, &stacks);
    let mut classes = FrameClasses::default();
    for s in &mut sites {
        s.addresses.sort_unstable();
        let counts = classes.counts(&s.stack);
        s.cpp_frames = counts.cpp;
        s.python_frames = counts.python;
        s.dropped_frames = counts.dropped;
        s.share = if allocated == 0 {
            0.0
        } else {
            s.bytes as f64 / allocated as f64
        };
    }
    // Twice: stacks that the first frame found still leaves alike (they
    // part in C++ frames or deeper) get a second one.
    distinguish_stack_labels(&mut sites);
    distinguish_stack_labels(&mut sites);
    shorten_parted_labels(&mut sites);
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
    Sites {
        grouping,
        allocated,
        sites,
    }
}

/// The blocks of one distinct stack at one site.
struct StackTally {
    site: usize,
    /// Σ block sizes (bytes).
    bytes: u64,
    /// The largest block's size (bytes).
    largest: u64,
    stack: Frames,
}

/// Sets each site's [`Site::called_from`], its bytes, its number of caller
/// paths and its [`Site::stack`] from the tallies of its distinct stacks:
/// stacks with the same callers after the site's frame are one path; the
/// path with the most bytes wins (ties: the one with the larger block,
/// then the one whose frames sort first, so every run picks the same).
fn settle_caller_paths(sites: &mut [Site], tallies: &[StackTally]) {
    // Per site: callers → (bytes, largest block, the tally of its stack).
    // Keyed by the frames themselves; only each site's winner is worded.
    type PathTally = (u64, u64, usize);
    let mut paths: Vec<FxHashMap<Vec<&Frame>, PathTally>> =
        (0..sites.len()).map(|_| FxHashMap::default()).collect();
    // Whether a frame is a user frame, once per distinct frame (keyed by
    // its strings' addresses, as `FrameClasses` is): the stacks of a site
    // share most of their callers.
    let mut user_frames: FxHashMap<(usize, usize), bool> = FxHashMap::default();
    let mut user = |f: &Frame| {
        let key = (
            Arc::as_ptr(&f.name).cast::<u8>() as usize,
            Arc::as_ptr(&f.filename).cast::<u8>() as usize,
        );
        *user_frames.entry(key).or_insert_with(|| is_user(f))
    };
    for (at, t) in tallies.iter().enumerate() {
        let (Some(site), Some(by_path)) = (sites.get(t.site), paths.get_mut(t.site)) else {
            continue;
        };
        let chain = site
            .key
            .frame()
            .map(|frame| callers_by(&t.stack, frame, &mut user))
            .unwrap_or_default();
        let entry = by_path.entry(chain).or_insert((0, 0, at));
        entry.0 = entry.0.saturating_add(t.bytes);
        if t.largest > entry.1 {
            entry.1 = t.largest;
            entry.2 = at;
        }
    }
    for (site, by_path) in sites.iter_mut().zip(paths) {
        site.caller_paths = if site.key.frame().is_some() {
            by_path.len()
        } else {
            0
        };
        let best = by_path.into_iter().max_by(|(a_chain, a), (b_chain, b)| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.cmp(&b.1))
                .then_with(|| frames_order(b_chain, a_chain))
        });
        if let Some((chain, (bytes, largest, at))) = best {
            site.called_from = chain.into_iter().map(frame_label).collect();
            site.called_from_bytes = bytes;
            site.largest = largest;
            if let Some(t) = tallies.get(at) {
                site.stack = Arc::clone(&t.stack);
            }
        }
    }
}

/// Caller chains in order frame by frame, each by its short file, line
/// and function (what [`frame_label`] writes), without wording them.
fn frames_order(a: &[&Frame], b: &[&Frame]) -> std::cmp::Ordering {
    fn key<'f>(f: &&'f Frame) -> (&'f str, u64, &'f str) {
        (short_file(&f.filename), f.line, &f.name)
    }
    a.iter().map(key).cmp(b.iter().map(key))
}

/// Whole stacks that part only past the frame naming them share a label
/// (five rows of "_backends.py:288 einsum (stack of 70 frames)"): each such
/// label gains the innermost frame, user frames first, that some stack of
/// them lacks ("einsum … model.py:397 forward (stack of …)"), else the
/// first frame where its stack parts from another at the same depth.
/// Cost: the frames of those stacks, a few times over.
fn distinguish_stack_labels(sites: &mut [Site]) {
    // Grouped by the name without its frame count: a narrow pane cuts the
    // count first, so stacks of 65 and 70 frames named alike read alike.
    let mut by_label: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    for (i, s) in sites.iter().enumerate() {
        if matches!(s.key, SiteKey::Stack(_)) {
            let head = s
                .label
                .rsplit_once(" (stack of ")
                .map_or(s.label.as_str(), |(h, _)| h);
            by_label.entry(head).or_default().push(i);
        }
    }
    let mut relabel: Vec<(usize, String, Frame)> = Vec::new();
    for group in by_label.into_values().filter(|g| g.len() > 1) {
        let stacks: Vec<&[Frame]> = group
            .iter()
            .map(|&i| match &sites[i].key {
                SiteKey::Stack(frames) => frames.as_slice(),
                _ => &[],
            })
            .collect();
        let n = stacks.len();
        // How many stacks of the group hold each frame, and how many hold
        // each frame at each depth.
        let mut holding: FxHashMap<&Frame, usize> = FxHashMap::default();
        let deepest = stacks.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut at_depth: Vec<FxHashMap<&Frame, usize>> = vec![FxHashMap::default(); deepest];
        for stack in &stacks {
            let mut seen: FxHashSet<&Frame> = FxHashSet::default();
            for (depth, f) in stack.iter().enumerate() {
                if seen.insert(f) {
                    *holding.entry(f).or_default() += 1;
                }
                *at_depth[depth].entry(f).or_default() += 1;
            }
        }
        for (&i, stack) in group.iter().zip(&stacks) {
            let head = sites[i]
                .label
                .rsplit_once(" (stack of ")
                .map_or(sites[i].label.as_str(), |(h, _)| h);
            let names_more = |f: &Frame| frame_label(f) != head;
            let held = |f: &Frame| holding.get(f).copied().unwrap_or(0);
            // The frame fewest of them hold (the innermost of equals): the
            // one that tells this stack from the most others.
            let rarest = |user_only: bool| {
                stack
                    .iter()
                    .filter(|f| (!user_only || is_user(f)) && names_more(f) && held(f) < n)
                    .min_by_key(|f| held(f))
            };
            let parts_here =
                |depth: usize, f: &Frame| at_depth[depth].get(f).copied().unwrap_or(0) < n;
            let found = rarest(true).or_else(|| rarest(false)).or_else(|| {
                stack
                    .iter()
                    .enumerate()
                    .find(|&(depth, f)| parts_here(depth, f) && names_more(f))
                    .map(|(_, f)| f)
            });
            let Some(f) = found else {
                continue;
            };
            let label = &sites[i].label;
            let new = match label.rsplit_once(" (stack of ") {
                Some((head, tail)) => format!("{head} … {} (stack of {tail}", frame_label(f)),
                None => format!("{label} … {}", frame_label(f)),
            };
            relabel.push((i, new, f.clone()));
        }
    }
    for (i, label, parting) in relabel {
        sites[i].label = label;
        sites[i].parting.push(parting);
    }
}

/// Gives each whole-stack site whose label gained parting frames its
/// [`ShortLabel`]: among the sites named after the same frame, the
/// shortest [`Brevity`] that tells as many of them apart as their labels
/// do (their labels may read alike too, when the stacks part only in
/// frames whose names are equal).
fn shorten_parted_labels(sites: &mut [Site]) {
    let mut by_head: FxHashMap<&Frame, Vec<usize>> = FxHashMap::default();
    for (i, s) in sites.iter().enumerate() {
        if let SiteKey::Stack(frames) = &s.key
            && !s.parting.is_empty()
            && let Some(head) = stack_head(frames)
        {
            by_head.entry(head).or_default().push(i);
        }
    }
    // A Python head is named by its function, unless another head has the
    // same function name (`__init__` of two files): then by where it is.
    let mut heads_named: FxHashMap<&str, usize> = FxHashMap::default();
    for head in by_head.keys() {
        let named = heads_named.entry(&head.name).or_default();
        *named = named.saturating_add(1);
    }
    let mut shortened: Vec<(usize, ShortLabel)> = Vec::new();
    for (head, group) in &by_head {
        let parting_at = |i: usize, brevity: Brevity| {
            sites[i]
                .parting
                .iter()
                .map(|f| brief_frame_label(f, brevity))
                .collect::<Vec<_>>()
        };
        let distinct = |brevity: Brevity| {
            group
                .iter()
                .map(|&i| parting_at(i, brevity))
                .collect::<FxHashSet<_>>()
                .len()
        };
        let told_apart = distinct(Brevity::Full);
        let brevity = [Brevity::Shortest, Brevity::Short]
            .into_iter()
            .find(|&b| distinct(b) == told_apart)
            .unwrap_or(Brevity::Full);
        // A C++ head keeps its class: `apply` alone would name every
        // autograd node (`DivBackward0::apply`).
        let unique_name = heads_named.get(&*head.name).is_some_and(|&n| n == 1);
        let head_name = if !is_python(head) {
            brief_frame_label(head, Brevity::Short)
        } else if unique_name && !head.name.is_empty() {
            head.name.to_string()
        } else {
            brief_frame_label(head, Brevity::Shortest)
        };
        for &i in group {
            shortened.push((
                i,
                ShortLabel {
                    head: head_name.clone(),
                    parting: parting_at(i, brevity),
                },
            ));
        }
    }
    for (i, short) in shortened {
        sites[i].short_label = Some(short);
    }
}

/// Whether a snapshot records stacks anywhere (a block's or an event's).
pub fn records_stacks(snapshot: &Snapshot) -> bool {
    snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .any(|b| !b.frames.is_empty())
        || snapshot
            .device_traces
            .iter()
            .flatten()
            .any(|e| !e.frames.is_empty())
}

/// What a GPU without trace events says of how its file was recorded: the
/// advice on getting a trace depends on it (stacks alone do not mean that
/// a trace was being kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTraceCause {
    /// `torch.cuda.memory_snapshot()`'s bare segment list: never a trace,
    /// whatever was recorded.
    SegmentList,
    /// Torch 2.0's per-block history: it keeps a trace only with
    /// `trace_alloc_max_entries` above its default of 1.
    BlockHistory,
    /// Stacks of the live blocks and no trace: history was recording the
    /// state only (`enabled="state"`), or was stopped before the dump
    /// (which drops the trace).
    StateOnly,
    /// No stacks and no trace: history was off.
    HistoryOff,
    /// Another GPU of the file has trace events: history was on, this GPU
    /// had none.
    OtherGpus,
}

impl NoTraceCause {
    /// How to record a trace, for a file (or GPU) without one, by what the
    /// file says of how it was recorded: the summary's advice, and the
    /// advice of an `--at` that names a moment of a trace the file lacks.
    pub fn how_to_get_a_trace(self) -> &'static str {
        match self {
            Self::SegmentList => {
                "torch.cuda.memory_snapshot() gives the final state only: \
                 torch.cuda.memory._dump_snapshot(FILE) saves the trace with it"
            }
            Self::BlockHistory => {
                "torch 2.0 keeps a trace only with \
                 _record_memory_history(True, trace_alloc_max_entries=N); \
                 from torch 2.1 _record_memory_history() keeps one"
            }
            Self::StateOnly => {
                "history was on, as the blocks have stacks, but kept no trace: dump while \
                 _record_memory_history() still records with enabled=\"all\", the \
                 default; \"state\" keeps no trace, and stopping the recording drops it"
            }
            // A probe user turns history on with the probe's flag, not
            // the call in the script.
            Self::HistoryOff => {
                "record with torch.cuda.memory._record_memory_history(), or start the probe \
                 with python -m vramtop_probe --record-history, to get one"
            }
            Self::OtherGpus => "history was on; this GPU had no memory events while it recorded",
        }
    }
}

/// The [`NoTraceCause`] of a GPU without trace events in `snapshot`.
pub fn no_trace_cause(snapshot: &Snapshot) -> NoTraceCause {
    let any_events = snapshot
        .device_traces
        .iter()
        .flatten()
        .any(|e| !super::types::is_marker(e.action));
    if snapshot.format == super::types::SnapshotFormat::SegmentList {
        NoTraceCause::SegmentList
    } else if snapshot.block_history {
        NoTraceCause::BlockHistory
    } else if any_events {
        NoTraceCause::OtherGpus
    } else if records_stacks(snapshot) {
        NoTraceCause::StateOnly
    } else {
        NoTraceCause::HistoryOff
    }
}

/// Why blocks without a stack have none, given whether the file records
/// stacks at all.
pub fn no_stack_reason(records_stacks: bool) -> NoStackReason {
    if records_stacks {
        NoStackReason::BeforeRecording
    } else {
        NoStackReason::WithoutStacks
    }
}

/// Why the blocks of `snapshot` without a stack have none: as
/// [`no_stack_reason`], except that a final state read without its trace
/// and with no stack in its blocks cannot tell.
pub fn snapshot_no_stack_reason(snapshot: &Snapshot) -> NoStackReason {
    let records = records_stacks(snapshot);
    if !records && snapshot.trace_not_read {
        NoStackReason::TraceNotRead
    } else {
        no_stack_reason(records)
    }
}

/// Whether a trace's allocations carry stacks.
pub fn trace_records_stacks(events: &[TraceEntry]) -> bool {
    events
        .iter()
        .any(|e| e.action == TraceAction::Alloc && !e.frames.is_empty())
}

/// The sites of a snapshot's final state: every allocated block of the
/// segments of `device` (all devices when `None`).
pub fn sites_of_snapshot(snapshot: &Snapshot, device: Option<u32>, grouping: Grouping) -> Sites {
    let reason = snapshot_no_stack_reason(snapshot);
    let blocks = snapshot
        .segments
        .iter()
        .filter(|s| device.is_none_or(|d| s.device == d))
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| LiveAllocation {
            address: b.address,
            size: b.size,
            requested_size: b.requested_size,
            frames: &b.frames,
            stack_lost: false,
        });
    group(blocks, grouping, reason)
}

/// The sites of a scrub state (the allocated blocks at one cursor); the
/// blocks without a stack are `no_stack`'s, or allocated before the trace
/// began when the trace no longer holds their stack.
pub fn sites_of_state(state: &ScrubState, grouping: Grouping, no_stack: NoStackReason) -> Sites {
    sites_of_live_blocks(state.blocks.iter(), grouping, no_stack)
}

/// [`sites_of_state`] of some of a state's blocks, by address.
pub fn sites_of_live_blocks<'a>(
    blocks: impl Iterator<Item = (&'a u64, &'a LiveBlock)>,
    grouping: Grouping,
    no_stack: NoStackReason,
) -> Sites {
    let blocks = blocks
        .filter(|(_, b)| b.state == BlockState::ActiveAllocated)
        .map(|(&address, b)| LiveAllocation {
            address,
            size: b.size,
            requested_size: b.requested_size,
            frames: &b.frames,
            stack_lost: b.stack_lost,
        });
    group(blocks, grouping, no_stack)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(file: &str, line: u64, name: &str) -> Frame {
        Frame {
            filename: file.into(),
            line,
            name: name.into(),
        }
    }

    fn cuda_stack(user: Frame) -> Frames {
        vec![
            frame("??", 0, "torch::unwind::unwind()"),
            frame(
                "??",
                0,
                "torch::CapturedTraceback::gather(bool, bool, bool)",
            ),
            frame(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            frame(
                "/build/aten/src/ATen/RegisterCUDA.cpp",
                0,
                "at::wrapper_CUDA_addmm",
            ),
            frame(
                "/usr/src/python/Objects/call.c",
                215,
                "_PyObject_MakeTpCall",
            ),
            frame(
                "/env/lib/python3.10/site-packages/torch/nn/modules/linear.py",
                117,
                "forward",
            ),
            frame("/env/lib/python3.10/contextlib.py", 79, "inner"),
            user,
            frame("/home/me/train.py", 10, "<module>"),
        ]
        .into()
    }

    fn alloc(address: u64, size: u64, frames: &Frames) -> LiveAllocation<'_> {
        LiveAllocation {
            address,
            size,
            requested_size: size - 1,
            frames,
            stack_lost: false,
        }
    }

    /// A stack allocating at `model.py:42 step`, called from `line` of
    /// `train.py`.
    fn step_called_from(line: u64) -> Frames {
        let mut s: Vec<Frame> = cuda_stack(frame("/home/me/model.py", 42, "step")).to_vec();
        s.pop();
        s.push(frame("/home/me/train.py", line, "<module>"));
        s.into()
    }

    #[test]
    fn called_from_is_the_caller_path_holding_most_bytes_not_the_largest_block() {
        const MIB: u64 = 1 << 20;
        let (many, some, one_big) = (
            step_called_from(507),
            step_called_from(319),
            step_called_from(171),
        );
        // 7 × 100 MiB through line 507, 3 × 100 MiB through 319, and one
        // 200 MiB block (the largest) through 171.
        let mut blocks: Vec<LiveAllocation<'_>> = (0..7)
            .map(|i| alloc(i * 1000, 100 * MIB, &many))
            .chain((0..3).map(|i| alloc(10_000 + i * 1000, 100 * MIB, &some)))
            .collect();
        blocks.push(alloc(50_000, 200 * MIB, &one_big));
        let sites = group(blocks, Grouping::UserFrame, NoStackReason::WithoutStacks);
        let [site] = sites.sites.as_slice() else {
            panic!("one site: {:?}", sites.sites);
        };
        assert_eq!(site.caller_paths, 3);
        assert_eq!(site.called_from, vec!["train.py:507 <module>".to_string()]);
        assert_eq!(site.called_from_bytes, 700 * MIB);
        assert_eq!(site.bytes, 1200 * MIB);
        // The stack shown is one of that path's.
        assert_eq!(site.stack, many);
    }

    #[test]
    fn a_site_reached_one_way_has_one_caller_path_with_all_its_bytes() {
        let stack = step_called_from(10);
        let sites = group(
            [alloc(0, 512, &stack), alloc(4096, 1024, &stack)],
            Grouping::UserFrame,
            NoStackReason::WithoutStacks,
        );
        let [site] = sites.sites.as_slice() else {
            panic!("one site: {:?}", sites.sites);
        };
        assert_eq!(site.caller_paths, 1);
        assert_eq!(site.called_from_bytes, site.bytes);
    }

    #[test]
    fn every_noise_pattern_is_found_anywhere_in_a_name_or_file() {
        let long = "x".repeat(300);
        for p in NOISE_FUNCTIONS {
            for name in [p.to_string(), format!("{long}{p}"), format!("a{p}{long}")] {
                assert!(is_noise(&frame("f.cpp", 1, &name)), "{name}");
            }
        }
        for p in NOISE_FILES {
            for file in [
                p.to_string(),
                format!("{long}{p}"),
                format!("/{p}/{long}.c"),
            ] {
                assert!(is_noise(&frame(&file, 1, "f")), "{file}");
            }
        }
        assert!(!is_noise(&frame("/home/me/model.py", 42, "forward")));
        assert!(!is_noise(&frame(
            "/build/aten/src/ATen/native/cuda/Blas.cpp",
            0,
            "at::native::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&)"
        )));
    }

    #[test]
    fn memory_viz_noise_frames_are_dropped() {
        let s = cuda_stack(frame("/home/me/model.py", 42, "step"));
        let kept: Vec<&str> = informative(&s).map(|f| &*f.name).collect();
        assert!(!kept.iter().any(|n| n.contains("unwind")));
        assert!(!kept.iter().any(|n| n.contains("gather")));
        assert!(!kept.iter().any(|n| n.contains("PyObject_")));
        assert!(!kept.contains(&"at::wrapper_CUDA_addmm"), "dispatcher file");
        assert!(kept.contains(&"forward"));
        assert_eq!(
            cpp_frames(&s),
            0,
            "the allocator frame is C++ and informative, but never listed"
        );
    }

    #[test]
    fn frame_counts_split_every_frame_into_python_listed_cpp_and_dropped() {
        let mut s = cuda_stack(frame("/home/me/model.py", 42, "step")).to_vec();
        s.insert(3, frame("??", 0, "at::native::addmm_out_cuda(at::Tensor&)"));
        let counts = frame_counts(&s);
        assert_eq!(
            counts,
            FrameCounts {
                python: 4,
                cpp: 1,
                dropped: 5,
                launcher: 0,
            }
        );
        assert_eq!(counts.python + counts.cpp + counts.dropped, s.len());
        let python: Vec<&str> = listed_frames(&s, false).iter().map(|f| &*f.name).collect();
        assert_eq!(python, ["forward", "inner", "step", "<module>"]);
        let all = listed_frames(&s, true);
        assert_eq!(all.len(), counts.python + counts.cpp, "{all:?}");
        // Yiyi's stacks end in python3.9's runpy: dropped, as launcher
        // frames, not the allocator's.
        s.push(frame("/usr/lib/python3.9/runpy.py", 87, "_run_code"));
        s.push(frame(
            "/usr/lib/python3.9/runpy.py",
            197,
            "_run_module_as_main",
        ));
        let counts = frame_counts(&s);
        assert_eq!((counts.dropped, counts.launcher), (7, 2));
    }

    #[test]
    fn file_line_site_of_a_backward_thread_is_its_op_not_the_thread_entry() {
        // A stack of autograd's backward thread: no Python frame, and the
        // thread's entry the only frame with a line.
        let stack = vec![
            frame("??", 0, "torch::unwind::unwind()"),
            frame(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
            ),
            frame("??", 0, "at::_ops::mul_Scalar::call(at::Tensor const&)"),
            frame(
                "??",
                0,
                "torch::autograd::generated::PowBackward0::apply(std::vector<at::Tensor>&&)",
            ),
            frame(
                "??",
                0,
                "torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)",
            ),
            frame(
                "/opt/conda/work/gcc/libstdc++-v3/src/c++11/thread.cc",
                82,
                "execute_native_thread_routine",
            ),
            frame("??", 0, "start_thread"),
            frame("", 0, "__clone3"),
        ];
        let key = site_key(&stack, Grouping::FileLine).expect("a site");
        assert_eq!(key, site_key(&stack, Grouping::UserFrame).expect("a site"));
        assert!(
            key.label().contains("PowBackward0::apply"),
            "{}",
            key.label()
        );
        // A C++ frame with a line of its own is still the file:line site.
        let mut with_line = stack.clone();
        with_line[2] = frame("BinaryOps.cpp", 123, "at::native::mul(at::Tensor const&)");
        let key = site_key(&with_line, Grouping::FileLine).expect("a site");
        assert!(key.label().contains("BinaryOps.cpp:123"), "{}", key.label());
    }

    #[test]
    fn a_whole_stack_site_without_python_is_named_after_its_op_not_the_allocator() {
        let stack = vec![
            frame(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
            ),
            frame("??", 0, "at::_ops::bmm::call(at::Tensor const&)"),
            frame(
                "??",
                0,
                "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor>&&)",
            ),
            frame("??", 0, "start_thread"),
        ];
        let label = site_key(&stack, Grouping::Stack).expect("a site").label();
        assert!(label.starts_with("BmmBackward0::apply"), "{label}");
        assert!(label.ends_with("(stack of 4 frames)"), "{label}");
        // With a user frame the stack is named after it, as by user frame.
        let mut with_user = stack.clone();
        with_user.insert(3, frame("/home/me/train.py", 7, "step"));
        let label = site_key(&with_user, Grouping::Stack)
            .expect("a site")
            .label();
        assert!(label.starts_with("train.py:7 step"), "{label}");
    }

    #[test]
    fn a_file_line_site_is_never_a_frame_of_the_interpreters_c_source() {
        // silmont: a tensor method called from Python. descrobject.c has a
        // line, torch's C++ frames do not; two user lines calling methods
        // were one "method_vectorcall_VARARGS_KEYWORDS" site.
        let stack = |line| {
            vec![
                frame(
                    "CUDACachingAllocator.cpp",
                    0,
                    "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
                ),
                frame(
                    "python_variable_methods.cpp",
                    0,
                    "torch::autograd::THPVariable_max(_object*, _object*, _object*)",
                ),
                frame(
                    "/usr/local/src/conda/python-3.12.3/Objects/descrobject.c",
                    365,
                    "method_vectorcall_VARARGS_KEYWORDS",
                ),
                frame("/home/me/trace_peak_memory.py", line, "custom_softmax"),
            ]
        };
        let six = site_key(&stack(6), Grouping::FileLine).expect("a site");
        let eight = site_key(&stack(8), Grouping::FileLine).expect("a site");
        assert_eq!(six.label(), "trace_peak_memory.py:6 custom_softmax");
        assert_ne!(six, eight);
        for interpreter in [
            "/usr/src/python/Python/ceval.c",
            "Objects/call.c",
            "/build/cpython/Include/internal/pycore_call.h",
        ] {
            assert!(is_interpreter(&frame(interpreter, 1, "f")), "{interpreter}");
        }
        for other in [
            "/src/MyObjects/thing.c",
            "Objects/model.py",
            "BinaryOps.cpp",
        ] {
            assert!(!is_interpreter(&frame(other, 1, "f")), "{other}");
        }
    }

    #[test]
    fn cached_frame_classes_count_every_stack_as_frame_counts_does() {
        let mut a = cuda_stack(frame("/home/me/model.py", 42, "step")).to_vec();
        a.insert(3, frame("??", 0, "at::native::addmm_out_cuda(at::Tensor&)"));
        // A second stack sharing `a`'s strings (as a file's stacks do) and
        // one with equal strings at other addresses.
        let mut b: Vec<Frame> = a.iter().rev().cloned().collect();
        b.push(frame("/home/me/data.py", 7, "load"));
        let c: Vec<Frame> = a
            .iter()
            .map(|f| frame(&f.filename, f.line, &f.name))
            .collect();
        let mut classes = FrameClasses::default();
        for stack in [&a, &b, &c, &a] {
            assert_eq!(classes.counts(stack), frame_counts(stack));
        }
        assert_eq!(classes.counts(&b).python, frame_counts(&a).python + 1);
    }

    #[test]
    fn site_json_counts_the_cpp_frames_the_viewer_hides() {
        let mut s = cuda_stack(frame("/home/me/model.py", 42, "step")).to_vec();
        s.insert(3, frame("??", 0, "at::native::addmm_out_cuda(at::Tensor&)"));
        let s: Frames = s.into();
        let sites = group(
            [alloc(0x1000, 512, &s)],
            Grouping::UserFrame,
            NoStackReason::BeforeRecording,
        );
        let json = serde_json::to_value(&sites.sites[0]).expect("JSON");
        assert_eq!(json["cpp_frames"], 1, "the allocator frame is not counted");
        assert_eq!(json["python_frames"], 4);
        assert_eq!(json["dropped_frames"], 5);
    }

    /// A stack allocating through the C++ frame `op`, under the user's
    /// `einsum` called from `model.py:line`.
    /// Sites by whole stack of one 4 MiB block per stack.
    fn by_stack(stacks: &[Frames]) -> Sites {
        group(
            stacks
                .iter()
                .enumerate()
                .map(|(i, s)| alloc(0x1000 * (i as u64 + 1), 4 << 20, s)),
            Grouping::Stack,
            NoStackReason::BeforeRecording,
        )
    }

    fn einsum_stack(op: &str, line: u64) -> Frames {
        vec![
            frame("??", 0, "torch::unwind::unwind()"),
            frame(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            frame("??", 0, op),
            frame("/home/me/_backends.py", 288, "einsum"),
            frame("/home/me/model.py", line, "forward"),
            frame("/home/me/train.py", 9, "main"),
        ]
        .into()
    }

    #[test]
    fn a_whole_stack_label_too_long_for_its_row_keeps_the_frames_that_part_it() {
        let strided =
            "at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >(long)";
        let plain = "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)";
        let stacks = [
            einsum_stack(strided, 397),
            einsum_stack(plain, 397),
            einsum_stack(strided, 492),
            einsum_stack(plain, 492),
        ];
        let sites = by_stack(&stacks);
        let labels: FxHashSet<&str> = sites.sites.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels.len(), 4, "{labels:?}");
        // 50 characters: the label's room at 80 columns. The plain cut
        // read "_backends.py:288 einsum … model.py:397 forward … a" twice.
        let narrow: Vec<String> = sites.sites.iter().map(|s| s.label_within(50)).collect();
        let distinct: FxHashSet<&String> = narrow.iter().collect();
        assert_eq!(distinct.len(), 4, "{narrow:?}");
        for (site, short) in sites.sites.iter().zip(&narrow) {
            assert!(short.chars().count() <= 50, "{short:?}");
            let op = if site.label.contains("strided") {
                "_empty_strided_generic"
            } else {
                "_empty_generic"
            };
            let line = if site.label.contains("397") {
                "model.py:397"
            } else {
                "model.py:492"
            };
            assert_eq!(short, &format!("einsum … {line} … {op}"), "{}", site.label);
            // Room for the label: the label; the JSON keeps it whole.
            assert_eq!(site.label_within(500), site.label);
        }
        // Narrower, the head (what they share) goes first, then the
        // parting frames are cut in their middles.
        let cut: Vec<String> = sites.sites.iter().map(|s| s.label_within(39)).collect();
        assert!(
            cut.contains(&"… model.py:397 … _empty_strided_generic".to_string()),
            "{cut:?}"
        );
        let cut: Vec<String> = sites.sites.iter().map(|s| s.label_within(36)).collect();
        assert!(
            cut.contains(&"… model.py:397 … _empty_st…d_generic".to_string()),
            "{cut:?}"
        );
    }

    #[test]
    fn short_cpp_names_keep_the_class_where_the_function_alone_reads_alike() {
        let output = |op: &str| {
            format!(
                "void at::(anonymous namespace)::structured_{op}_out_functional::\
                 set_output_raw_strided(long, c10::IntArrayRef)"
            )
        };
        let mul = einsum_stack(&output("mul"), 527);
        let sigmoid = einsum_stack(&output("sigmoid"), 527);
        let sites = group(
            [
                alloc(0x1000, 2 << 20, &mul),
                alloc(0x2000, 1 << 20, &sigmoid),
            ],
            Grouping::Stack,
            NoStackReason::BeforeRecording,
        );
        let narrow: Vec<String> = sites.sites.iter().map(|s| s.label_within(60)).collect();
        assert_eq!(
            narrow,
            [
                "… structured_mul_out_functional::set_output_raw_strided",
                "… structured_sigmoid_out_functional::set_output_raw_strided",
            ],
            "the function alone (set_output_raw_strided) names both"
        );
    }

    #[test]
    fn short_names_of_heads_that_share_a_function_name_say_where_they_are() {
        let init = |file: &str, line: u64, caller: u64| -> Frames {
            vec![
                frame(file, line, "__init__"),
                frame("/home/me/workers.py", caller, "build"),
                frame("/home/me/train.py", 9, "main"),
            ]
            .into()
        };
        let stacks = [
            init("/home/me/buffer.py", 592, 77),
            init("/home/me/buffer.py", 592, 81),
            init("/home/me/buffer.py", 586, 77),
            init("/home/me/buffer.py", 586, 81),
        ];
        let sites = by_stack(&stacks);
        let mut narrow: Vec<String> = sites.sites.iter().map(|s| s.label_within(40)).collect();
        narrow.sort();
        assert_eq!(
            narrow,
            [
                "buffer.py:586 … workers.py:77",
                "buffer.py:586 … workers.py:81",
                "buffer.py:592 … workers.py:77",
                "buffer.py:592 … workers.py:81",
            ]
        );
    }

    #[test]
    fn template_arguments_go_unless_the_brackets_do_not_pair() {
        assert_eq!(
            without_template_arguments("at::detail::_empty_strided_generic<c10::ArrayRef<long> >"),
            "at::detail::_empty_strided_generic"
        );
        assert_eq!(
            without_template_arguments("c10::operator<"),
            "c10::operator<"
        );
        assert_eq!(without_template_arguments("a>b"), "a>b");
    }

    #[test]
    fn whole_stacks_named_alike_gain_the_frame_where_they_part() {
        // One einsum called from two lines of the model, and from the
        // first line again under another script.
        let with_caller = |caller: Frame, script: &str| -> Frames {
            let mut s = cuda_stack(frame("/home/me/einsum_lib.py", 288, "einsum")).to_vec();
            s.push(caller);
            s.push(frame(script, 9, "main"));
            s.into()
        };
        let a = with_caller(
            frame("/home/me/model.py", 397, "forward"),
            "/home/me/train.py",
        );
        let b = with_caller(
            frame("/home/me/model.py", 490, "forward"),
            "/home/me/train.py",
        );
        let c = with_caller(
            frame("/home/me/model.py", 397, "forward"),
            "/home/me/eval.py",
        );
        let sites = group(
            [
                alloc(0x1000, 3 << 20, &a),
                alloc(0x2000, 2 << 20, &b),
                alloc(0x3000, 1 << 20, &c),
            ],
            Grouping::Stack,
            NoStackReason::BeforeRecording,
        );
        let labels: Vec<&str> = sites.sites.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels.len(), 3);
        assert!(
            labels[0].contains("einsum … model.py:397 forward (stack of"),
            "{labels:?}"
        );
        assert!(
            labels[1].contains("einsum … model.py:490 forward (stack of"),
            "{labels:?}"
        );
        assert!(
            labels[2].contains("einsum … eval.py:9 main (stack of"),
            "{labels:?}"
        );
        // Stacks named alike but of different lengths are told apart too
        // (a narrow pane cuts the frame count first); the second pass tells
        // apart those the first frame left alike.
        let mut deeper = a.to_vec();
        deeper.insert(3, frame("??", 0, "at::native::empty_cuda(long)"));
        let deeper: Frames = deeper.into();
        let sites = group(
            [alloc(0x1000, 3 << 20, &a), alloc(0x2000, 2 << 20, &deeper)],
            Grouping::Stack,
            NoStackReason::BeforeRecording,
        );
        let labels: Vec<&str> = sites.sites.iter().map(|s| s.label.as_str()).collect();
        let heads: Vec<&str> = labels
            .iter()
            .map(|l| l.rsplit_once(" (stack of ").map_or(*l, |(h, _)| h))
            .collect();
        assert_ne!(heads[0], heads[1], "{labels:?}");
        assert!(labels[1].contains("empty_cuda"), "{labels:?}");
        // A lone stack keeps its plain name; other groupings are untouched.
        let one = group(
            [alloc(0x1000, 512, &a)],
            Grouping::Stack,
            NoStackReason::BeforeRecording,
        );
        assert!(!one.sites[0].label.contains('…'), "{}", one.sites[0].label);
    }

    #[test]
    fn default_grouping_is_innermost_user_frame_outside_torch_and_stdlib() {
        let s = cuda_stack(frame("/home/me/model.py", 42, "step"));
        let key = site_key(&s, Grouping::UserFrame);
        assert_eq!(
            key,
            Some(SiteKey::Frame(frame("/home/me/model.py", 42, "step")))
        );
        assert_eq!(key.map(|k| k.label()).as_deref(), Some("model.py:42 step"));
    }

    #[test]
    fn python_frame_grouping_takes_torch_frames_too() {
        let s = cuda_stack(frame("/home/me/model.py", 42, "step"));
        let Some(SiteKey::Frame(f)) = site_key(&s, Grouping::PythonFrame) else {
            panic!("a frame key");
        };
        assert_eq!(&*f.name, "forward");
        assert!(is_torch(&f));
    }

    #[test]
    fn function_grouping_merges_lines_of_one_function() {
        let a = cuda_stack(frame("/home/me/model.py", 42, "step"));
        let b = cuda_stack(frame("/home/me/model.py", 50, "step"));
        let sites = group(
            [alloc(0x1000, 512, &a), alloc(0x2000, 1024, &b)],
            Grouping::Function,
            NoStackReason::BeforeRecording,
        );
        assert_eq!(sites.sites.len(), 1);
        assert_eq!(sites.sites[0].blocks, 2);
        let by_line = group(
            [alloc(0x1000, 512, &a), alloc(0x2000, 1024, &b)],
            Grouping::UserFrame,
            NoStackReason::BeforeRecording,
        );
        assert_eq!(by_line.sites.len(), 2);
        assert_eq!(by_line.sites[0].bytes, 1024, "largest first");
    }

    /// What `--group`'s help says of the user frame: a third-party
    /// package's frame (einops) is one, its caller in the user's code
    /// is not the site.
    #[test]
    fn a_library_frame_outside_torch_is_the_user_frame() {
        let einsum = frame(
            "/env/lib/python3.11/site-packages/einops/_backends.py",
            288,
            "einsum",
        );
        let s = vec![
            frame(
                "/env/lib/python3.11/site-packages/torch/functional.py",
                402,
                "einsum",
            ),
            einsum.clone(),
            frame("/home/me/model.py", 41, "forward"),
        ];
        assert!(is_user(&einsum));
        assert_eq!(
            site_key(&s, Grouping::UserFrame),
            Some(SiteKey::Frame(einsum))
        );
    }

    /// What `--group function`'s help says: a frame names no class, so
    /// two modules' `forward`s in one file are one site.
    #[test]
    fn function_grouping_merges_every_forward_of_one_file() {
        let attention = cuda_stack(frame("/home/me/model.py", 397, "forward"));
        let mlp = cuda_stack(frame("/home/me/model.py", 105, "forward"));
        let sites = group(
            [alloc(0x1000, 512, &attention), alloc(0x2000, 1024, &mlp)],
            Grouping::Function,
            NoStackReason::BeforeRecording,
        );
        assert_eq!(sites.sites.len(), 1);
        assert_eq!(sites.sites[0].label, "forward (model.py)");
    }

    #[test]
    fn blocks_without_stack_form_one_group_that_says_why() {
        let empty: Frames = Vec::new().into();
        let s = cuda_stack(frame("/home/me/model.py", 42, "step"));
        let sites = group(
            [
                alloc(0x1000, 4096, &empty),
                alloc(0x3000, 2048, &empty),
                alloc(0x2000, 512, &s),
            ],
            Grouping::UserFrame,
            NoStackReason::BeforeRecording,
        );
        assert_eq!(sites.allocated, 4096 + 2048 + 512);
        let top = &sites.sites[0];
        assert!(top.key.is_no_stack());
        assert_eq!(top.blocks, 2);
        assert_eq!(top.addresses, vec![0x1000, 0x3000]);
        assert!(top.label.contains("allocated while history was off"));
        assert_eq!(sites.no_stack_bytes(), 6144);
        assert_eq!(sites.site_of(0x2000), Some(1));
        let total: u64 = sites.sites.iter().map(|s| s.bytes).sum();
        assert_eq!(total, sites.allocated);
        let shares: f64 = sites.sites.iter().map(|s| s.share).sum();
        assert!((shares - 1.0).abs() < 1e-9);
    }

    #[test]
    fn cpp_only_stack_is_named_after_its_first_frame_outside_the_allocator() {
        let s: Frames = vec![
            frame("??", 0, "torch::unwind::unwind()"),
            frame(
                "CUDACachingAllocator.cpp",
                0,
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            ),
            frame(
                "",
                0,
                "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)",
            ),
            frame("", 0, "at::cuda::getNewWorkspace()"),
            frame("??", 0, "torch::autograd::Engine::thread_main"),
        ]
        .into();
        let Some(SiteKey::Frame(f)) = site_key(&s, Grouping::UserFrame) else {
            panic!("a frame key");
        };
        assert_eq!(&*f.name, "at::cuda::getNewWorkspace()");
        let mut backward = s.to_vec();
        backward.insert(
            4,
            frame(
                "??",
                0,
                "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor>&&)",
            ),
        );
        let Some(SiteKey::Frame(f)) = site_key(&backward, Grouping::UserFrame) else {
            panic!("a frame key");
        };
        assert!(f.name.contains("BmmBackward0"), "{}", f.name);
    }

    #[test]
    fn stack_of_only_noise_still_gets_a_site() {
        let s: Frames = vec![frame("??", 0, "torch::unwind::unwind()")].into();
        for g in Grouping::ALL {
            assert!(site_key(&s, g).is_some(), "{g:?}");
        }
    }

    /// `stack` as `python -m vramtop_probe train.py` records it: the
    /// launcher's frames (runpy, the probe's `main`) outermost.
    fn launched(mut stack: Vec<Frame>) -> Frames {
        stack.extend([
            frame("<frozen runpy>", 88, "_run_code"),
            frame("<frozen runpy>", 287, "run_path"),
            frame(
                "/env/lib/python3.11/site-packages/vramtop_probe/__main__.py",
                113,
                "main",
            ),
            frame("/usr/lib/python3.10/runpy.py", 86, "_run_code"),
            frame("<frozen runpy>", 198, "_run_module_as_main"),
        ]);
        stack.into()
    }

    #[test]
    fn the_launchers_frames_are_neither_sites_nor_callers() {
        let torch = frame(
            "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
            1747,
            "_call_impl",
        );
        let script = frame("/home/me/train.py", 40, "<module>");
        let stack = launched(vec![
            frame("CUDACachingAllocator.cpp", 0, "malloc"),
            torch.clone(),
            script.clone(),
        ]);
        let site = site_key(&stack, Grouping::UserFrame).expect("a site");
        assert_eq!(site, SiteKey::Frame(script.clone()));
        // Nothing called the script's own frame.
        assert!(callers(&stack, &script).is_empty());
        let Some(SiteKey::Stack(kept)) = site_key(&stack, Grouping::Stack) else {
            panic!("a whole-stack key");
        };
        assert_eq!(kept.last(), Some(&script));
        // A stack with no frame of the script's: torch's, not the probe's.
        let bare = launched(vec![torch.clone()]);
        let site = site_key(&bare, Grouping::UserFrame).expect("a site");
        assert_eq!(site, SiteKey::Frame(torch));
    }

    #[test]
    fn stdlib_and_windows_torch_paths_are_not_user_code() {
        assert!(is_stdlib(&frame(
            "/usr/lib/python3.11/threading.py",
            1,
            "run"
        )));
        assert!(is_stdlib(&frame("<frozen runpy>", 1, "_run_code")));
        assert!(!is_stdlib(&frame(
            "/usr/lib/python3.11/site-packages/x/y.py",
            1,
            "f"
        )));
        assert!(is_torch(&frame(
            "C:\\Python\\Lib\\site-packages\\torch\\nn\\functional.py",
            1,
            "f"
        )));
        assert!(is_user(&frame("/home/me/cz3vkiv.py", 1647, "call")));
    }

    #[test]
    fn cpp_names_lose_return_type_and_parameters() {
        assert_eq!(
            short_function("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)"),
            "at::detail::_empty_generic<long>"
        );
        assert_eq!(
            short_function("void f<std::pair<a, b> >(int)"),
            "f<std::pair<a, b> >"
        );
        assert_eq!(
            short_function("at::cuda::getNewWorkspace()"),
            "at::cuda::getNewWorkspace"
        );
        assert_eq!(
            frame_label(&frame("??", 0, "at::cuda::getNewWorkspace()")),
            "at::cuda::getNewWorkspace (C++)"
        );
    }

    #[test]
    fn an_autograd_nodes_apply_is_labelled_as_the_backward_pass() {
        let node = |name| frame("??", 0, name);
        assert_eq!(
            frame_label(&node(
                "torch::autograd::generated::DivBackward0::apply(std::vector<at::Tensor>&&)"
            )),
            "DivBackward0::apply (C++, backward pass)"
        );
        assert_eq!(
            frame_label(&frame(
                "/src/torch/csrc/autograd/generated/Functions.cpp",
                12,
                "torch::autograd::generated::MaxPool2DWithIndicesBackward1::apply(x)"
            )),
            "MaxPool2DWithIndicesBackward1::apply (Functions.cpp:12, backward pass)"
        );
        // Neither a forward function nor a node's other methods.
        for name in [
            "at::cuda::getNewWorkspace()",
            "torch::autograd::generated::DivBackward0::release_variables()",
            "Backward0::apply()",
        ] {
            assert!(
                frame_label(&node(name)).ends_with("(C++)"),
                "{name}: {}",
                frame_label(&node(name))
            );
        }
        let function = SiteKey::Function {
            filename: "??".into(),
            name: "torch::autograd::generated::BmmBackward0::apply(x)".into(),
        };
        assert_eq!(function.label(), "BmmBackward0::apply (C++, backward pass)");
    }

    #[test]
    fn callers_are_the_user_frames_outside_the_site() {
        let site = frame("/home/me/model.py", 42, "step");
        let s = cuda_stack(site.clone());
        let c: Vec<&str> = callers(&s, &site).iter().map(|f| &*f.name).collect();
        assert_eq!(c, vec!["<module>"]);
    }

    #[test]
    fn unknown_line_is_shown_as_question_mark() {
        assert_eq!(file_line(&frame("/a/b.cpp", 0, "f")), "b.cpp:?");
        assert_eq!(file_line(&frame("/a/b.py", u64::MAX, "f")), "b.py:?");
        assert_eq!(file_line(&frame("", 0, "f")), "??:?");
    }

    #[test]
    fn grouping_cycles_through_every_mode() {
        let mut g = Grouping::default();
        let mut seen = vec![g];
        for _ in 1..Grouping::ALL.len() {
            g = g.next();
            seen.push(g);
        }
        assert_eq!(seen, Grouping::ALL.to_vec());
        assert_eq!(g.next(), Grouping::UserFrame);
    }

    #[test]
    fn history_off_advice_names_the_call_and_the_probes_flag() {
        let advice = NoTraceCause::HistoryOff.how_to_get_a_trace();
        assert!(
            advice.contains("torch.cuda.memory._record_memory_history()"),
            "{advice}"
        );
        assert!(
            advice.contains("python -m vramtop_probe --record-history"),
            "{advice}"
        );
    }
}
