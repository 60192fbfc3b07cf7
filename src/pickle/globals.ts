/**
 * Which globals a pickle may name. The decision is an allowlist: `safe` only for names below, which the converter
 * interprets itself (it never imports or calls anything). Everything else is `unknown`, or `dangerous` when it is a
 * callable known to run code, touch files or the network, or reach other objects (collected from the classic
 * payloads and from the bypass reports against picklescan, fickling, modelscan and torch's weights_only loader).
 */

export type Verdict = "safe" | "unknown" | "dangerous";

const TORCH_DTYPES = [
  "bool",
  "uint8",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint16",
  "uint32",
  "uint64",
  "float16",
  "bfloat16",
  "float32",
  "float64",
  "complex32",
  "complex64",
  "complex128",
  "float8_e4m3fn",
  "float8_e5m2",
  "float8_e4m3fnuz",
  "float8_e5m2fnuz",
  "float8_e8m0fnu",
  "float4_e2m1fn_x2",
  "qint8",
  "quint8",
  "qint32",
  "quint4x2",
  "quint2x4",
  "bits8",
  "bits16",
  "bits1x8",
  "bits2x4",
  "bits4x2",
  // torch.half, torch.float, … are the same objects as the names above but pickle under their canonical names.
];

/** Legacy typed storage classes → the torch dtype of their elements. */
export const STORAGE_DTYPES: ReadonlyMap<string, string> = new Map([
  ["BoolStorage", "bool"],
  ["ByteStorage", "uint8"],
  ["CharStorage", "int8"],
  ["ShortStorage", "int16"],
  ["IntStorage", "int32"],
  ["LongStorage", "int64"],
  ["HalfStorage", "float16"],
  ["BFloat16Storage", "bfloat16"],
  ["FloatStorage", "float32"],
  ["DoubleStorage", "float64"],
  ["ComplexFloatStorage", "complex64"],
  ["ComplexDoubleStorage", "complex128"],
  ["QInt8Storage", "qint8"],
  ["QUInt8Storage", "quint8"],
  ["QInt32Storage", "qint32"],
  ["QUInt4x2Storage", "quint4x2"],
  ["QUInt2x4Storage", "quint2x4"],
]);

const ALLOWED = new Set<string>([
  "collections.OrderedDict",
  "collections.Counter",
  "builtins.set",
  "builtins.frozenset",
  "builtins.bytearray",
  "builtins.bytes",
  "builtins.complex",
  "_codecs.encode",
  "torch._utils._rebuild_tensor",
  "torch._utils._rebuild_tensor_v2",
  "torch._utils._rebuild_tensor_v3",
  "torch._utils._rebuild_parameter",
  "torch._utils._rebuild_parameter_with_state",
  // Allowlisted by torch too; parsed here so files that hold them get a precise "not convertible" reason.
  "torch._utils._rebuild_qtensor",
  "torch._utils._rebuild_sparse_tensor",
  "torch._utils._rebuild_nested_tensor",
  "torch._utils._rebuild_meta_tensor_no_storage",
  "torch._utils._rebuild_wrapper_subclass",
  "torch._utils._rebuild_device_tensor_from_numpy",
  "torch._tensor._rebuild_from_type_v2",
  "torch.nn.parameter.Parameter",
  "torch.Tensor",
  "torch.Size",
  "torch.device",
  "torch.serialization._get_layout",
  "torch.per_tensor_affine",
  "torch.per_channel_affine",
  "torch.per_tensor_symmetric",
  "torch.per_channel_symmetric",
  "torch.per_channel_affine_float_qparams",
  "torch.storage.UntypedStorage",
  "torch.storage.TypedStorage",
  "torch.UntypedStorage",
  "torch.TypedStorage",
  ...TORCH_DTYPES.map((d) => `torch.${d}`),
  ...[...STORAGE_DTYPES.keys()].flatMap((s) => [`torch.${s}`, `torch.cuda.${s}`]),
  // Legacy tensor type objects, named by the tar format's tensor records.
  ...["Bool", "Byte", "Char", "Short", "Int", "Long", "Half", "BFloat16", "Float", "Double"].flatMap((t) => [
    `torch.${t}Tensor`,
    `torch.cuda.${t}Tensor`,
  ]),
  // numpy arrays, dtypes and scalars (numpy 1.x and 2.x module paths).
  "numpy.core.multiarray._reconstruct",
  "numpy._core.multiarray._reconstruct",
  "numpy.core.multiarray.scalar",
  "numpy._core.multiarray.scalar",
  "numpy.ndarray",
  "numpy.dtype",
]);

/** Whole modules (and their submodules) whose every member is dangerous to call from a pickle. */
const DANGEROUS_MODULES = [
  "os",
  "posix",
  "nt",
  "posixpath",
  "ntpath",
  "subprocess",
  "_posixsubprocess",
  "_winapi",
  "pty",
  "runpy",
  "pip",
  "_pip",
  "ensurepip",
  "venv",
  "pkgutil",
  "importlib",
  "imp",
  "zipimport",
  "pickle",
  "_pickle",
  "cPickle",
  "pickletools",
  "marshal",
  "shelve",
  "dill",
  "cloudpickle",
  "joblib",
  "shutil",
  "tempfile",
  "glob",
  "io",
  "_io",
  "fileinput",
  "linecache",
  "socket",
  "_socket",
  "socketserver",
  "ssl",
  "asyncio",
  "selectors",
  "multiprocessing",
  "concurrent",
  "threading",
  "_thread",
  "signal",
  "webbrowser",
  "http",
  "urllib",
  "urllib2",
  "httplib",
  "ftplib",
  "smtplib",
  "poplib",
  "imaplib",
  "telnetlib",
  "xmlrpc",
  "requests",
  "httpx",
  "aiohttp",
  "code",
  "codeop",
  "pdb",
  "bdb",
  "trace",
  "timeit",
  "profile",
  "cProfile",
  "doctest",
  "pydoc",
  "idlelib",
  "lib2to3",
  "distutils",
  "setuptools",
  "site",
  "sysconfig",
  "ctypes",
  "_ctypes",
  "cffi",
  "sys",
  "types",
  "inspect",
  "gc",
  "weakref",
  "operator",
  "_operator",
  "functools",
  "_functools",
  "itertools",
  "__builtins__",
  "_sitebuiltins",
  "platform",
  "commands",
  "uuid",
  "_osx_support",
  "_aix_support",
  "_pyrepl",
  "test",
  "unittest",
  "tarfile",
  "zipfile",
  "bz2",
  "lzma",
  "gzip",
  "logging",
  "yaml",
  "jinja2",
  "numpy.testing",
  "numpy.f2py",
  "numpy.distutils",
  "numpy.ctypeslib",
  "numpy.lib.npyio",
  "numpy.load",
  "torch.hub",
  "torch.jit",
  "torch._dynamo",
  "torch._inductor",
  "torch.fx",
  "torch.utils.cpp_extension",
  "torch.utils._config_module",
  "torch.distributed",
  "torch.package",
  "torch.serialization",
  "torch.load",
  "torch.storage._load_from_bytes",
  "torch._C",
  "torch.ops",
  "torch.classes",
  "keras",
  "tensorflow",
  "__main__",
];

/** Single callables (module.name) that are dangerous although their module is not listed above. */
const DANGEROUS_NAMES = new Set<string>([
  ...[
    "eval",
    "exec",
    "execfile",
    "compile",
    "getattr",
    "setattr",
    "delattr",
    "__import__",
    "open",
    "file",
    "input",
    "raw_input",
    "breakpoint",
    "globals",
    "locals",
    "vars",
    "type",
    "object",
    "super",
    "memoryview",
    "help",
    "exit",
    "quit",
    "copyright",
    "credits",
    "license",
    "print",
    "reload",
  ].map((n) => `builtins.${n}`),
  "torch.load",
  "torch.save",
  "torch.compile",
  "torch.storage._load_from_bytes",
  "numpy.load",
  "numpy.save",
  "numpy.fromfile",
  "numpy.memmap",
  "numpy.loadtxt",
  "numpy.genfromtxt",
  "numpy.testing._private.utils.runstring",
]);

/** Attribute names that walk from an allowed object to arbitrary ones (dotted names since protocol 4). */
const ESCAPE_ATTRIBUTES = /(^|\.)__[A-Za-z0-9_]+__($|\.)/;

/**
 * Python 3 resolves protocol 0–2 names written by Python 2 through `_compat_pickle`; the decision must be made on the
 * name Python would actually import (`__builtin__.eval` is `builtins.eval`).
 */
const IMPORT_MAPPING: ReadonlyMap<string, string> = new Map([
  ["__builtin__", "builtins"],
  ["copy_reg", "copyreg"],
  ["Queue", "queue"],
  ["SocketServer", "socketserver"],
  ["ConfigParser", "configparser"],
  ["repr", "reprlib"],
  ["thread", "_thread"],
  ["dummy_thread", "_dummy_thread"],
  ["xmlrpclib", "xmlrpc.client"],
  ["SimpleXMLRPCServer", "xmlrpc.server"],
  ["DocXMLRPCServer", "xmlrpc.server"],
  ["httplib", "http.client"],
  ["Cookie", "http.cookies"],
  ["cookielib", "http.cookiejar"],
  ["BaseHTTPServer", "http.server"],
  ["SimpleHTTPServer", "http.server"],
  ["CGIHTTPServer", "http.server"],
  ["commands", "subprocess"],
  ["urlparse", "urllib.parse"],
  ["robotparser", "urllib.robotparser"],
  ["urllib2", "urllib.request"],
  ["cPickle", "pickle"],
  ["StringIO", "io"],
  ["cStringIO", "io"],
  ["UserDict", "collections"],
  ["UserList", "collections"],
  ["UserString", "collections"],
  ["_abcoll", "collections.abc"],
  ["test.test_support", "test.support"],
  ["markupbase", "_markupbase"],
  ["_winreg", "winreg"],
  ["anydbm", "dbm"],
  ["whichdb", "dbm"],
  ["dbhash", "dbm.bsd"],
  ["dumbdbm", "dbm.dumb"],
  ["dbm", "dbm.ndbm"],
  ["gdbm", "dbm.gnu"],
]);

const NAME_MAPPING: ReadonlyMap<string, string> = new Map([
  ["__builtin__.xrange", "builtins.range"],
  ["__builtin__.reduce", "functools.reduce"],
  ["__builtin__.intern", "sys.intern"],
  ["__builtin__.unichr", "builtins.chr"],
  ["__builtin__.unicode", "builtins.str"],
  ["__builtin__.long", "builtins.int"],
  ["__builtin__.basestring", "builtins.str"],
]);

/** The (module, name) Python 3 would import for a pickled global. */
export function canonicalGlobal(module: string, name: string): { module: string; name: string } {
  const mapped = NAME_MAPPING.get(`${module}.${name}`);
  if (mapped !== undefined) {
    const dot = mapped.lastIndexOf(".");
    return { module: mapped.slice(0, dot), name: mapped.slice(dot + 1) };
  }
  return { module: IMPORT_MAPPING.get(module) ?? module, name };
}

function underModule(module: string, list: readonly string[]): boolean {
  return list.some((m) => module === m || module.startsWith(`${m}.`));
}

/** The verdict for one global, judged on the name Python would import and on the raw name. */
export function classifyGlobal(module: string, name: string): Verdict {
  const canonical = canonicalGlobal(module, name);
  for (const { module: m, name: n } of [canonical, { module, name }]) {
    // Module names may be dunders (`__builtin__`, `__main__`); attribute chains through dunders are escapes.
    if (ESCAPE_ATTRIBUTES.test(n)) return "dangerous";
    const full = `${m}.${n}`;
    if (DANGEROUS_NAMES.has(full) || underModule(m, DANGEROUS_MODULES) || underModule(full, DANGEROUS_MODULES)) {
      // builtins is dangerous as a module, but a few of its types are plain data the converter builds itself.
      if (!ALLOWED.has(`${canonical.module}.${canonical.name}`)) return "dangerous";
    }
  }
  return ALLOWED.has(`${canonical.module}.${canonical.name}`) ? "safe" : "unknown";
}

/** The worse of two verdicts. */
export function worse(a: Verdict, b: Verdict): Verdict {
  const order: Verdict[] = ["safe", "unknown", "dangerous"];
  return order[Math.max(order.indexOf(a), order.indexOf(b))]!;
}
