// The recorder's compiled half: what the dispatcher and the interpreter run, per test.
//
// Two observers, both cheap enough to stay on for a whole suite:
//  - a *global* RecordFunction callback (at::addGlobalCallback). It sees every operator
//    call the dispatcher makes, on every thread (the autograd engine's included), nested
//    calls of composite ops, ops called from other ops' C++ code, custom ops, and the
//    autograd nodes of a backward pass. Unlike a profiler it never clashes with a test
//    that starts a profiler of its own.
//  - a counting wrapper around the CPU allocator: an epoch in which anything allocated
//    CPU memory used the CPU (the device a test used, as a name of kind 'd').
//  - a C profile function (PyEval_SetProfile): every Python function entered and every
//    C function called from Python, without a Python-level callback per call. The one
//    exception is a module body (a `<module>` frame) starting or ending: the Python side
//    is told, so that what an import runs is kept as the module's, not as the work of
//    whichever test happened to import it first.
//
// A test is an *epoch*: each name seen stores the current epoch in its slot, and the
// Python side reads the names whose slot holds the epoch it is closing. Names are interned
// once, process-wide, under a mutex; the hot path takes no lock (a thread-local cache
// from the name's pointer to its id, checked against the interned text because pointers
// of freed schemas can be reused by other ops). It uses only what torch 2.6 and later
// declare alike.
// TT_PYTHON_ONLY builds the Python observation alone, without torch: the tests drive the
// profile function and sys.monitoring with it on an interpreter that has no torch
// (tests/test_record_python_backends.py). The op and device observers are then absent.
#ifndef TT_PYTHON_ONLY
#include <ATen/core/dispatch/ObservedOperators.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#endif
#include <Python.h>
#include <frameobject.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr uint32_t kCapacity = 1u << 18;  // distinct names per process

std::atomic<uint32_t> g_epoch{1};
std::atomic<uint32_t> g_count{0};
std::atomic<bool> g_overflow{false};
std::atomic<uint32_t> g_seen[kCapacity];
const char* g_names[kCapacity];  // "op\0name.overload" style: kind byte then text
std::mutex g_intern_mutex;
std::unordered_map<std::string, uint32_t>* g_ids = nullptr;
#ifndef TT_PYTHON_ONLY
bool g_registered = false;
at::CallbackHandle g_handle = 0;
#endif

// kind: 'o' an operator (name.overload), 'b' an autograd node of a backward pass, 'd' a
// device type whose memory was allocated.
uint32_t intern(char kind, const char* name, const char* overload) {
  std::string text(1, kind);
  text += name;
  if (overload != nullptr && overload[0] != '\0') {
    text += '.';
    text += overload;
  }
  std::lock_guard<std::mutex> lock(g_intern_mutex);
  if (g_ids == nullptr) g_ids = new std::unordered_map<std::string, uint32_t>();
  auto found = g_ids->find(text);
  if (found != g_ids->end()) return found->second;
  uint32_t id = g_count.load(std::memory_order_relaxed);
  if (id >= kCapacity) {
    g_overflow.store(true);
    return kCapacity;
  }
  char* copy = new char[text.size() + 1];
  std::memcpy(copy, text.c_str(), text.size() + 1);
  g_names[id] = copy;
  (*g_ids)[text] = id;
  g_count.store(id + 1, std::memory_order_release);
  return id;
}

#ifndef TT_PYTHON_ONLY
// Whether the interned name `id` is (kind, name) with any overload: a cached pointer is
// trusted only while the text behind it is still the op's.
bool same_text(uint32_t id, char kind, const char* name) {
  const char* stored = g_names[id];
  if (stored[0] != kind) return false;
  size_t length = std::strlen(name);
  if (std::strncmp(stored + 1, name, length) != 0) return false;
  return stored[1 + length] == '\0' || stored[1 + length] == '.';
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  const char kind = fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? 'b' : 'o';
  const char* name = fn.name();
  if (name == nullptr) return nullptr;
  // Keyed by the name's pointer: each overload's schema holds its own copy of the name.
  thread_local std::unordered_map<const char*, uint32_t> cache;
  auto hit = cache.find(name);
  uint32_t id;
  if (hit != cache.end() && same_text(hit->second, kind, name)) {
    id = hit->second;
  } else {
    std::string overload;
    if (kind == 'o') {
      // Only dispatcher operators, which have a schema: other RecordFunction scopes of
      // FUNCTION kind ("Torch-Compiled Region: 0/0", RECORD_FUNCTION labels, the autograd
      // engine's "evaluate_function") name no op. They are never cached, so a name
      // pointer a label once had cannot hide an op later.
      auto op = fn.operator_name();  // copies: only when a name is first seen here
      if (!op.has_value()) return nullptr;
      overload = op->overload_name;
    }
    id = intern(kind, name, overload.c_str());
    if (id >= kCapacity) return nullptr;
    cache[name] = id;
  }
  g_seen[id].store(g_epoch.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return nullptr;
}

// Stamps the current epoch on the CPU's device name at every allocation, and hands the
// allocation itself to the allocator it replaced: the memory, its deleter and every other
// answer stay that allocator's, so nothing a test does with a tensor changes.
class CountingAllocator final : public c10::Allocator {
 public:
  CountingAllocator(c10::Allocator* inner, uint32_t id) : inner_(inner), id_(id) {}
  c10::DataPtr allocate(size_t n) override {
    g_seen[id_].store(g_epoch.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return inner_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
  bool is_simple_data_ptr(const c10::DataPtr& data_ptr) const override {
    return inner_->is_simple_data_ptr(data_ptr);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
  uint32_t id_;
};
CountingAllocator* g_cpu_counter = nullptr;
#endif  // TT_PYTHON_ONLY

// The interpreter's side. Every structure below is touched only with the GIL held.
std::unordered_set<PyObject*>* g_codes = nullptr;   // code objects entered (strong refs)
// Each code object's record name (a tuple) or None (not the tree's), as the Python side
// named it once: a drain then hands Python only the code objects it has not named yet.
// Strong references, so that an address is never another code object's.
std::unordered_map<PyObject*, PyObject*>* g_code_names = nullptr;
// C functions called, one per method definition (a bound builtin method is a new object at
// every attribute access, its PyMethodDef is not), each described as (module, type of its
// self or None, qualified name). Never the function itself: a bound method holds its self,
// and CPython hands the profile function a bound method for every method-descriptor call
// (`storage._share_filename_cpu_()`), which kept the object alive until the test ended (a
// tensor's shared-memory file outlived it: test_multiprocessing.py's test_fs failed).
std::unordered_map<const void*, PyObject*>* g_cfuncs = nullptr;
PyObject* g_profile_token = nullptr;  // what sys.getprofile() returns while we observe
PyObject* g_module_callback = nullptr;  // callable(code, entering, globals), or none
thread_local std::vector<PyFrameObject*> t_module_frames;  // module bodies running
size_t g_module_frames_open = 0;  // all threads' t_module_frames: returns skip the TLS

// The recorder's own Python work (the module callback, draining, journal entries) runs
// with the calling thread's profile function suspended, as a profile function suspends
// itself while it runs: it is nobody's work, and on 3.11 every instruction run under a
// profile function takes the tracing path (docs/recording.md#cost).
void quiet_enter(PyThreadState* tstate) {
#if PY_VERSION_HEX >= 0x030B0000
  PyThreadState_EnterTracing(tstate);
#else
  ++tstate->tracing;
  tstate->cframe->use_tracing = 0;
#endif
}

void quiet_leave(PyThreadState* tstate) {
#if PY_VERSION_HEX >= 0x030B0000
  PyThreadState_LeaveTracing(tstate);
#else
  --tstate->tracing;
  tstate->cframe->use_tracing =
      tstate->tracing == 0 && (tstate->c_tracefunc != nullptr || tstate->c_profilefunc != nullptr);
#endif
}

bool is_module_body(PyCodeObject* code) {
  PyObject* name = code->co_name;
  return PyUnicode_GET_LENGTH(name) == 8 && PyUnicode_CompareWithASCIIString(name, "<module>") == 0;
}

// Tells the Python side that a module body starts or ends. Whatever exception is being
// raised through the frame stays as it was; one raised by the callback is dropped, so an
// import never fails because it was observed.
void module_boundary(PyFrameObject* frame, int entering) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(frame));
#if PY_VERSION_HEX >= 0x030B0000
  PyObject* globals = PyFrame_GetGlobals(frame);
#else
  PyObject* globals = frame->f_globals;
  Py_XINCREF(globals);
#endif
  PyThreadState* tstate = PyThreadState_Get();
  quiet_enter(tstate);
  PyObject* result = PyObject_CallFunction(
      g_module_callback, "OiO", code, entering, globals != nullptr ? globals : Py_None);
  quiet_leave(tstate);
  Py_XDECREF(result);
  Py_XDECREF(globals);
  Py_DECREF(code);
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
}

// (module, type of self or None, __qualname__) of a builtin function, a new reference; no
// reference to its self. Whatever error the lookups raise is dropped.
PyObject* describe_cfunction(PyObject* function) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* self = PyCFunction_GET_SELF(function);
  PyObject* module = reinterpret_cast<PyCFunctionObject*>(function)->m_module;
  PyObject* owner = self != nullptr && !PyModule_Check(self)
      ? reinterpret_cast<PyObject*>(Py_TYPE(self)) : Py_None;
  PyObject* qualname = PyObject_GetAttrString(function, "__qualname__");
  PyObject* about = Py_BuildValue(
      "(OOO)", module != nullptr ? module : Py_None, owner,
      qualname != nullptr ? qualname : Py_None);
  Py_XDECREF(qualname);
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
  return about;
}

void note_cfunction(PyObject* function) {
  const void* definition = reinterpret_cast<PyCFunctionObject*>(function)->m_ml;
  if (g_cfuncs->find(definition) == g_cfuncs->end()) {
    PyObject* about = describe_cfunction(function);
    if (about != nullptr) g_cfuncs->emplace(definition, about);
  }
}

// A module body's frame returns (or unwinds). Frames above it that never reported their
// end are closed with it, so one lost event cannot misattribute what follows.
void module_frame_ends(PyFrameObject* frame) {
  for (size_t depth = t_module_frames.size(); depth-- > 0;) {
    if (t_module_frames[depth] != frame) continue;
    while (t_module_frames.size() > depth) {
      PyFrameObject* ending = t_module_frames.back();
      t_module_frames.pop_back();
      --g_module_frames_open;
      module_boundary(ending, 0);
    }
    break;
  }
}

int on_python_event(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  if (what == PyTrace_CALL) {
    PyObject* code = reinterpret_cast<PyObject*>(PyFrame_GetCode(frame));  // new reference
    bool module = PyCode_Check(code) && is_module_body(reinterpret_cast<PyCodeObject*>(code));
    if (!g_codes->insert(code).second) Py_DECREF(code);
    if (module && g_module_callback != nullptr) {
      t_module_frames.push_back(frame);
      ++g_module_frames_open;
      module_boundary(frame, 1);
    }
  } else if (what == PyTrace_RETURN && g_module_frames_open != 0 && !t_module_frames.empty()) {
    module_frame_ends(frame);
  } else if (what == PyTrace_C_CALL && PyCFunction_Check(arg)) {
    note_cfunction(arg);
  }
  return 0;
}

#if PY_VERSION_HEX >= 0x030C0000
// The same observation through sys.monitoring (Python 3.12+; docs/recording.md, "sys.monitoring"):
// the callbacks below are registered for the recorder's own tool id by
// indexer/record/python_monitoring.py. PY_START and PY_RESUME return DISABLE once the code
// object is noted, so the function runs specialized for the rest of the window;
// restart_events() at every drain that follows a DISABLE opens the next window. A window
// holds exactly what the profile function's set holds for it: every code object run in
// it fired at least once. CALL sites stay on: a site calls many functions, and a
// disabled one would hide the C functions it calls later in the window.
bool g_monitoring = false;          // the callbacks below are registered and on
bool g_disabled_since_restart = false;
bool g_restart_failed = false;      // sticky: code disabled before it may stay unobserved
PyObject* g_disable = nullptr;      // sys.monitoring.DISABLE
PyObject* g_missing = nullptr;      // sys.monitoring.MISSING
PyObject* g_restart = nullptr;      // sys.monitoring.restart_events
PyObject* g_watch_return = nullptr; // callable(code): PY_RETURN on for a module body

PyObject* disable() {
  g_disabled_since_restart = true;
  Py_INCREF(g_disable);
  return g_disable;
}

void note_code(PyObject* code) {
  if (g_codes->insert(code).second) Py_INCREF(code);
}

// PY_START and PY_RESUME: (code, offset).
PyObject* mon_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!g_monitoring || nargs < 1) Py_RETURN_NONE;
  PyObject* code = args[0];
  note_code(code);
  if (!(PyCode_Check(code) && is_module_body(reinterpret_cast<PyCodeObject*>(code)))) {
    return disable();
  }
  // A module body: never disabled (it runs once; a second run must be seen starting).
  if (g_module_callback != nullptr) {
    PyFrameObject* frame = PyEval_GetFrame();  // borrowed: the body's own frame
    if (frame != nullptr) {
      if (g_watch_return != nullptr) {
        PyObject* done = PyObject_CallOneArg(g_watch_return, code);
        Py_XDECREF(done);
        PyErr_Clear();
      }
      t_module_frames.push_back(frame);
      ++g_module_frames_open;
      module_boundary(frame, 1);
    }
  }
  Py_RETURN_NONE;
}

// PY_THROW: (code, offset, exception); cannot be disabled.
PyObject* mon_throw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_monitoring && nargs >= 1) note_code(args[0]);
  Py_RETURN_NONE;
}

// PY_RETURN (on module bodies only) and PY_UNWIND (everywhere): (code, offset, value).
PyObject* mon_end(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!g_monitoring || g_module_frames_open == 0 || t_module_frames.empty() || nargs < 1) {
    Py_RETURN_NONE;
  }
  PyObject* code = args[0];
  if (!(PyCode_Check(code) && is_module_body(reinterpret_cast<PyCodeObject*>(code)))) {
    Py_RETURN_NONE;
  }
  PyFrameObject* frame = PyEval_GetFrame();
  if (frame != nullptr) module_frame_ends(frame);
  Py_RETURN_NONE;
}

// CALL: (code, offset, callable, first argument or MISSING). A C function is reported as
// the profile function is told of it: a builtin as itself, a method descriptor's call as
// the bound method CPython makes for a profile function (none without an argument).
PyObject* mon_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!g_monitoring || nargs < 4) Py_RETURN_NONE;
  PyObject* callable = args[2];
  if (PyCFunction_Check(callable)) {
    note_cfunction(callable);
  } else if (Py_IS_TYPE(callable, &PyMethodDescr_Type) && args[3] != g_missing) {
    const void* definition = reinterpret_cast<PyMethodDescrObject*>(callable)->d_method;
    if (g_cfuncs->find(definition) == g_cfuncs->end()) {
      PyObject* self = args[3];
      PyObject* bound = Py_TYPE(callable)->tp_descr_get(
          callable, self, reinterpret_cast<PyObject*>(Py_TYPE(self)));
      if (bound == nullptr) {
        PyErr_Clear();
      } else {
        if (PyCFunction_Check(bound)) note_cfunction(bound);
        Py_DECREF(bound);
      }
    }
  }
  Py_RETURN_NONE;
}

PyMethodDef g_mon_defs[] = {
    {"tt_mon_start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mon_start)),
     METH_FASTCALL, nullptr},
    {"tt_mon_throw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mon_throw)),
     METH_FASTCALL, nullptr},
    {"tt_mon_end", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mon_end)),
     METH_FASTCALL, nullptr},
    {"tt_mon_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mon_call)),
     METH_FASTCALL, nullptr},
};

void restart_if_disabled() {
  if (!g_monitoring || !g_disabled_since_restart || g_restart == nullptr) return;
  PyObject* done = PyObject_CallNoArgs(g_restart);
  if (done == nullptr) {
    // Code disabled in earlier windows stays disabled: every later window is incomplete,
    // which the Python side reports (tt_monitoring_restart_failed), never a silent loss.
    g_restart_failed = true;
    PyErr_Clear();
    return;
  }
  Py_DECREF(done);
  g_disabled_since_restart = false;
}
#else
void restart_if_disabled() {}
#endif

template <typename Set, typename Item>
PyObject* drain(Set* set, Item item_of) {
  PyObject* list = PyList_New(0);
  if (list == nullptr || set == nullptr) return list;
  for (auto& entry : *set) {
    PyObject* item = item_of(entry);
    PyList_Append(list, item);
    Py_DECREF(item);
  }
  set->clear();
  return list;
}

// Appends the string ``text`` to ``list``; false (a Python error set) when it cannot.
bool append_text(PyObject* list, const char* text) {
  PyObject* item = PyUnicode_FromString(text);
  if (item == nullptr) return false;
  int failed = PyList_Append(list, item);
  Py_DECREF(item);
  return failed == 0;
}

void ensure_sets() {
  if (g_codes == nullptr) {
    g_codes = new std::unordered_set<PyObject*>();
    g_cfuncs = new std::unordered_map<const void*, PyObject*>();
    if (g_code_names == nullptr) g_code_names = new std::unordered_map<PyObject*, PyObject*>();
  }
}

}  // namespace

extern "C" {

// The sys.monitoring callbacks, as Python callables: (PY_START and PY_RESUME, PY_THROW,
// PY_RETURN and PY_UNWIND, CALL); None before Python 3.12.
PyObject* tt_monitoring_callbacks() {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* result = PyTuple_New(4);
  if (result == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < 4; ++i) {
    PyObject* function = PyCFunction_New(&g_mon_defs[i], nullptr);
    if (function == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    PyTuple_SET_ITEM(result, i, function);
  }
  return result;
#else
  Py_RETURN_NONE;
#endif
}

// Turns the sys.monitoring callbacks' work on: sys.monitoring's DISABLE, MISSING and
// restart_events, and a callable(code) that turns PY_RETURN on for a module body.
// Returns 0, or -1 before Python 3.12.
int tt_monitoring_on(PyObject* disable, PyObject* missing, PyObject* restart,
                     PyObject* watch_return) {
#if PY_VERSION_HEX >= 0x030C0000
  ensure_sets();
  for (PyObject** slot : {&g_disable, &g_missing, &g_restart, &g_watch_return}) Py_XDECREF(*slot);
  Py_INCREF(disable);
  Py_INCREF(missing);
  Py_INCREF(restart);
  Py_INCREF(watch_return);
  g_disable = disable;
  g_missing = missing;
  g_restart = restart;
  g_watch_return = watch_return;
  g_disabled_since_restart = true;  // whatever another observer of this process disabled
  g_monitoring = true;
  return 0;
#else
  return -1;
#endif
}

// The callbacks note nothing more (they stay registered until the Python side frees
// the tool id) and drains no longer restart events.
// 1 once a restart_events() has failed (from then on no window is whole), else 0.
int tt_monitoring_restart_failed() {
#if PY_VERSION_HEX >= 0x030C0000
  return g_restart_failed ? 1 : 0;
#else
  return 0;
#endif
}

void tt_monitoring_off() {
#if PY_VERSION_HEX >= 0x030C0000
  g_monitoring = false;
#endif
}

#ifndef TT_PYTHON_ONLY
// Starts observing operators (once per process). Returns 0, or -1 when the callback
// could not be registered.
int tt_start_ops() {
  if (g_registered) return 0;
  try {
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(on_enter)
            .needsInputs(false)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } catch (...) {
    return -1;
  }
  g_registered = true;
  return 0;
}

// Counts CPU allocations (once per process). Returns 0; -1 when the CPU allocator slot
// is held by one of higher priority, which then stays in place uncounted.
int tt_start_devices() {
  if (g_cpu_counter != nullptr) return 0;
  uint32_t id = intern('d', "cpu", nullptr);
  if (id >= kCapacity) return -1;
  c10::Allocator* current = c10::GetCPUAllocator();
  auto* counter = new CountingAllocator(current, id);  // lives as long as the process
  c10::SetCPUAllocator(counter, 0);
  if (c10::GetCPUAllocator() != counter) return -1;
  g_cpu_counter = counter;
  return 0;
}
#endif  // TT_PYTHON_ONLY

// Observes the calling thread's Python functions; `token` is what sys.getprofile()
// answers while the observation is in place.
void tt_observe_thread(PyObject* token) {
  ensure_sets();
  if (g_profile_token == nullptr) {
    Py_INCREF(token);
    g_profile_token = token;
  }
  PyEval_SetProfile(on_python_event, g_profile_token);
}

void tt_stop_thread() { PyEval_SetProfile(nullptr, nullptr); }

// Suspends (1) or resumes (0) the calling thread's observation, for the recorder's own
// work; calls nest.
void tt_quiet(int on) {
  PyThreadState* tstate = PyThreadState_Get();
  if (on) {
    quiet_enter(tstate);
  } else {
    quiet_leave(tstate);
  }
}

// Removes the profile function from every thread that has it, as torch's Python tracer
// swaps thread states to install its own (profiler_python.cpp): a C call the tracer's
// start runs inside would otherwise report its return to the tracer, which saw no call
// ("Python replay stack is empty"). Returns how many threads had it.
int tt_step_aside() {
  PyThreadState* self = PyThreadState_Get();
  int removed = 0;
  for (PyThreadState* thread = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(self));
       thread != nullptr; thread = PyThreadState_Next(thread)) {
    if (thread->c_profilefunc != on_python_event) continue;
    PyThreadState_Swap(thread);
    PyEval_SetProfile(nullptr, nullptr);
    ++removed;
  }
  PyThreadState_Swap(self);
  return removed;
}

// Sets what is called when a module body starts or ends: callable(code, entering,
// globals); None stops the calls.
void tt_set_module_callback(PyObject* callable) {
  Py_XDECREF(g_module_callback);
  g_module_callback = callable == Py_None ? nullptr : callable;
  Py_XINCREF(g_module_callback);
}

// Closes the current epoch: a list of the names seen in it, each a kind letter ('o'
// operator, 'b' backward node, 'd' device type) followed by the name.
PyObject* tt_close_epoch() {
  uint32_t closing = g_epoch.fetch_add(1);
  uint32_t count = g_count.load(std::memory_order_acquire);
  PyObject* names = PyList_New(0);
  if (names == nullptr) return nullptr;
  for (uint32_t id = 0; id < count; ++id) {
    if (g_seen[id].load(std::memory_order_relaxed) == closing) {
      if (!append_text(names, g_names[id])) {
        Py_DECREF(names);
        return nullptr;
      }
    }
  }
  return names;
}

// What the interpreter ran since the last drain: (the record names of the code objects
// already named, the code objects not named yet), and C functions.
PyObject* tt_drain_codes() {
  PyObject* names = PyList_New(0);
  PyObject* unnamed = PyList_New(0);
  PyObject* result = names != nullptr && unnamed != nullptr ? PyTuple_Pack(2, names, unnamed)
                                                             : nullptr;
  Py_XDECREF(names);
  Py_XDECREF(unnamed);
  if (result == nullptr || g_codes == nullptr) return result;
  bool failed = false;
  for (PyObject* code : *g_codes) {
    auto known = g_code_names->find(code);
    if (!failed) {
      if (known == g_code_names->end()) {
        failed = PyList_Append(unnamed, code) != 0;
      } else if (known->second != Py_None) {
        failed = PyList_Append(names, known->second) != 0;
      }
    }
    Py_DECREF(code);
  }
  g_codes->clear();
  // The next window starts: every code object and call site disabled in this one fires
  // again when it next runs (sys.monitoring only; a no-op for the profile function).
  restart_if_disabled();
  if (failed) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

// Forgets every code object's name: names are an observer's (its tree), not the process's.
void tt_forget_code_names() {
  if (g_code_names == nullptr) return;
  auto* names = g_code_names;
  g_code_names = new std::unordered_map<PyObject*, PyObject*>();
  for (auto& entry : *names) {
    Py_DECREF(entry.first);
    Py_DECREF(entry.second);
  }
  delete names;
}

// Teaches the drain the record name (a tuple, or None) of each of `codes`: two lists of
// one length. Returns 0, or -1 (a Python error set) when they are not.
int tt_name_codes(PyObject* codes, PyObject* names) {
  if (!PyList_Check(codes) || !PyList_Check(names) || PyList_GET_SIZE(codes) != PyList_GET_SIZE(names)) {
    PyErr_SetString(PyExc_TypeError, "tt_name_codes: two lists of one length");
    return -1;
  }
  if (g_code_names == nullptr) g_code_names = new std::unordered_map<PyObject*, PyObject*>();
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(codes); ++i) {
    PyObject* code = PyList_GET_ITEM(codes, i);
    PyObject* name = PyList_GET_ITEM(names, i);
    auto inserted = g_code_names->emplace(code, name);
    if (!inserted.second) continue;
    Py_INCREF(code);
    Py_INCREF(name);
  }
  return 0;
}
PyObject* tt_drain_cfuncs() {
  return drain(g_cfuncs, [](const auto& entry) { return entry.second; });
}

#ifndef TT_PYTHON_ONLY
// Observes operators again after something removed every callback
// (torch._C._clear_callbacks); returns 0, or -1 when it cannot.
int tt_restart_ops() {
  g_registered = false;
  return tt_start_ops();
}
int tt_ops_registered() { return g_registered ? 1 : 0; }
#endif
int tt_overflowed() { return g_overflow.load() ? 1 : 0; }
#ifdef TT_PYTHON_ONLY
int tt_start_ops() { return 0; }
int tt_start_devices() { return -1; }
int tt_restart_ops() { return 0; }
PyObject* tt_unobserved_ops() { return PyList_New(0); }
#endif

#ifndef TT_PYTHON_ONLY
// The operators RecordFunction never reports (aten::size, aten::is_leaf, ...): that no
// test was seen running one of them says nothing.
PyObject* tt_unobserved_ops() {
  PyObject* names = PyList_New(0);
  if (names == nullptr) return nullptr;
  for (const auto& name : c10::ObservedOperators::getUnobservedOperatorList()) {
    if (!append_text(names, name.c_str())) {
      Py_DECREF(names);
      return nullptr;
    }
  }
  return names;
}
#endif  // TT_PYTHON_ONLY

}  // extern "C"
