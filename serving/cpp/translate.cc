// translate: load an exported translator the way TensorFlow Serving does, and run it.
//
// What it proves
//   TF Serving is a C++ binary: it loads a SavedModel with TensorFlow's C++ loader
//   (`tensorflow::LoadSavedModel`, the `serve` tag, a `SavedModelBundle`: session +
//   MetaGraphDef) and has the tensorflow-text kernels linked in. This program does the
//   same with no Python anywhere: it loads the op libraries it is given (tensorflow-text's
//   SentencePiece ops), loads the SavedModel, looks the input and output tensors of a
//   signature up in its SignatureDef and runs the whole batch through `Session::Run`.
//   If it translates, the export holds only ops a C++ server can run, its variables are
//   restored by the SavedModel's saver (the C++ loader's only way to initialize them;
//   Python's tf.saved_model.load uses the object graph instead), its assets (the
//   SentencePiece model) are found by the C++ loader, and its signatures are wired as
//   TF Serving's Predict API expects. tests/test_serving_cpp.py checks that its output
//   equals Python's `tf.saved_model.load(path).signatures[...]` line for line.
//
// Build (g++ with the flags of the installed TensorFlow wheel; prints the binary's path):
//   python serving/cpp/build.py [--output PATH]
//
// Run (one sentence per stdin line, one translation per stdout line, same order):
//   echo "A dog runs in the park." | serving/cpp/build/translate runs/multi30k/export/1 \
//       --op-library .venv/lib/python3.11/site-packages/tensorflow_text/python/ops/_sentencepiece_tokenizer.so
//   (`python -c "import sys; sys.path.insert(0, 'serving/cpp'); import build;
//    print(*build.tensorflow_text_op_libraries())"` prints the op libraries to pass.)
//
// Usage
//   translate <saved_model_dir> [--signature NAME] [--op-library PATH.so ...]
//             [--xla_cpu_compilation_enabled[=true|false]]
//   --signature   the SignatureDef to run (default serving_default); its input
//                 `sentences` must be a string tensor, its output `translations` too.
//   --op-library  a shared library of custom ops and kernels, loaded with TF_LoadLibrary
//                 before the SavedModel (repeatable).
//   --xla_cpu_compilation_enabled
//                 TF Serving's flag, with TF Serving's default (off): unless it is given,
//                 the program calls tensorflow::DisableXlaCompilation() exactly as
//                 tensorflow_model_server's main() does, so an XLA-compiled function
//                 fails at its first run as it would in the server.
//
// Input and output
//   stdin is read as raw bytes and split on '\n'; a final line without '\n' counts, an
//   input ending in '\n' has no extra empty sentence after it, and nothing else is
//   changed (no '\r' stripping, no UTF-8 check: invalid UTF-8 reaches the model as is).
//   All lines go to the model in ONE batch (an empty stdin is a batch of 0 sentences:
//   nothing is printed and the exit status is 0). Each string of `translations` is
//   written to stdout followed by '\n', in input order.
//
// Errors go to stderr, prefixed "translate: ", with a nonzero exit status:
//   2 bad command line; 3 an op library failed to load; 4 the SavedModel failed to
//   load (the message names the path); 5 the signature or its tensors are missing or
//   have the wrong type; 6 the run failed or returned the wrong number of outputs;
//   7 reading stdin or writing stdout failed.
//
// XLA: libtensorflow_cc.so.2 holds XLA's CPU JIT, as the tensorflow_model_server binary
// does. In an export of `Translator(jit_compile=True)` the search of a batch of at most
// `xla_max_batch_size` sentences (export_config.json) runs in a function marked
// `_XlaMustCompile`: without --xla_cpu_compilation_enabled that run fails with
// "XLA compilation disabled", exactly as in TF Serving; with it, XLA compiles the
// function at its first run. Larger batches take the graph-mode search and run either way.

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/compiler/jit/flags.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"

namespace {

constexpr char kUsage[] =
    "usage: translate <saved_model_dir> [--signature NAME] [--op-library PATH.so ...]\n"
    "                 [--xla_cpu_compilation_enabled[=true|false]]\n"
    "  Reads one sentence per line from stdin, runs them as one batch through the\n"
    "  signature's input 'sentences' and prints each string of its output\n"
    "  'translations' on its own line.\n";
constexpr char kInputKey[] = "sentences";
constexpr char kOutputKey[] = "translations";

enum ExitCode {
  kOk = 0,
  kUsageError = 2,
  kOpLibraryError = 3,
  kLoadError = 4,
  kSignatureError = 5,
  kRunError = 6,
  kIoError = 7,
};

int Fail(int code, const std::string& message) {
  std::cerr << "translate: " << message << std::endl;
  return code;
}

struct Options {
  std::string saved_model_dir;
  std::string signature = "serving_default";
  std::vector<std::string> op_libraries;
  bool xla_cpu_compilation_enabled = false;
};

// Parses argv into `options`; returns false (after printing why) on a bad command line.
bool ParseArgs(int argc, char** argv, Options* options, bool* help) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const std::string& flag, std::string* out) {
      const std::string prefix = flag + "=";
      if (arg.rfind(prefix, 0) == 0) {
        *out = arg.substr(prefix.size());
        return true;
      }
      if (arg == flag) {
        if (i + 1 >= argc) return false;
        *out = argv[++i];
        return true;
      }
      return false;
    };
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return true;
    }
    if (arg == "--signature" || arg.rfind("--signature=", 0) == 0) {
      if (!value("--signature", &options->signature) || options->signature.empty()) {
        std::cerr << "translate: --signature needs a name\n" << kUsage;
        return false;
      }
    } else if (arg == "--op-library" || arg.rfind("--op-library=", 0) == 0) {
      std::string path;
      if (!value("--op-library", &path) || path.empty()) {
        std::cerr << "translate: --op-library needs a path\n" << kUsage;
        return false;
      }
      options->op_libraries.push_back(path);
    } else if (arg == "--xla_cpu_compilation_enabled" || arg == "--xla_cpu_compilation_enabled=true") {
      options->xla_cpu_compilation_enabled = true;
    } else if (arg == "--xla_cpu_compilation_enabled=false") {
      options->xla_cpu_compilation_enabled = false;
    } else if (arg.size() > 1 && arg[0] == '-') {
      std::cerr << "translate: unknown option " << arg << "\n" << kUsage;
      return false;
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 1) {
    std::cerr << "translate: expected exactly one <saved_model_dir>, got " << positional.size() << "\n"
              << kUsage;
    return false;
  }
  options->saved_model_dir = positional[0];
  return true;
}

// Loads a custom-op library (its ops and kernels register themselves), as
// tf.load_op_library does in Python. The handle is kept for the process's lifetime.
bool LoadOpLibrary(const std::string& path, std::string* error) {
  TF_Status* status = TF_NewStatus();
  TF_Library* library = TF_LoadLibrary(path.c_str(), status);
  const bool ok = TF_GetCode(status) == TF_OK && library != nullptr;
  if (!ok) *error = TF_Message(status);
  TF_DeleteStatus(status);
  return ok;
}

// Reads all of stdin as bytes and splits it on '\n' (see the header comment).
bool ReadLines(std::vector<std::string>* lines) {
  std::string data((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return false;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    lines->emplace_back(data, start, end - start);
    start = end + 1;
  }
  return true;
}

// Finds `key` in a signature's inputs or outputs and checks it is a string tensor.
bool FindStringTensor(const google::protobuf::Map<std::string, tensorflow::TensorInfo>& tensors,
                      const std::string& key, const std::string& kind, const std::string& signature,
                      std::string* name, std::string* error) {
  auto it = tensors.find(key);
  if (it == tensors.end()) {
    std::string keys;
    for (const auto& entry : tensors) keys += (keys.empty() ? "" : ", ") + entry.first;
    *error = "signature '" + signature + "' has no " + kind + " '" + key + "' (its " + kind + "s: " +
             (keys.empty() ? "none" : keys) + ")";
    return false;
  }
  if (it->second.dtype() != tensorflow::DT_STRING) {
    *error = "signature '" + signature + "' " + kind + " '" + key + "' is " +
             tensorflow::DataTypeString(it->second.dtype()) + ", not string";
    return false;
  }
  if (it->second.name().empty()) {
    *error = "signature '" + signature + "' " + kind + " '" + key + "' has no tensor name (not a dense tensor)";
    return false;
  }
  *name = it->second.name();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);  // before any I/O; stdin/stdout are only used through iostreams
  Options options;
  bool help = false;
  if (!ParseArgs(argc, argv, &options, &help)) return kUsageError;
  if (help) {
    std::cout << kUsage;
    return kOk;
  }

  // As tensorflow_model_server's main(): XLA:CPU JIT is opt-in.
  if (!options.xla_cpu_compilation_enabled) tensorflow::DisableXlaCompilation();

  for (const std::string& path : options.op_libraries) {
    std::string error;
    if (!LoadOpLibrary(path, &error)) {
      return Fail(kOpLibraryError, "cannot load op library '" + path + "': " + error);
    }
  }

  // As TF Serving's SavedModelBundle: default session options, the `serve` tag.
  tensorflow::SavedModelBundle bundle;
  tensorflow::SessionOptions session_options;
  tensorflow::RunOptions run_options;
  // tensorflow::kSavedModelTagServe; tag_constants.h is not shipped in the wheel.
  const std::unordered_set<std::string> tags = {"serve"};
  tensorflow::Status status =
      tensorflow::LoadSavedModel(session_options, run_options, options.saved_model_dir, tags, &bundle);
  if (!status.ok()) {
    std::string message = "cannot load SavedModel '" + options.saved_model_dir + "' with tag 'serve': " +
                          std::string(status.message());
    if (message.find("Op type not registered") != std::string::npos) {
      message += " (pass the library that registers it with --op-library, e.g. tensorflow-text's "
                 "_sentencepiece_tokenizer.so)";
    }
    return Fail(kLoadError, message);
  }

  const auto& signatures = bundle.meta_graph_def.signature_def();
  auto signature = signatures.find(options.signature);
  if (signature == signatures.end()) {
    std::string names;
    for (const auto& entry : signatures) names += (names.empty() ? "" : ", ") + entry.first;
    return Fail(kSignatureError, "SavedModel '" + options.saved_model_dir + "' has no signature '" +
                                     options.signature + "' (it has: " + (names.empty() ? "none" : names) + ")");
  }
  std::string input_name, output_name, error;
  if (!FindStringTensor(signature->second.inputs(), kInputKey, "input", options.signature, &input_name, &error) ||
      !FindStringTensor(signature->second.outputs(), kOutputKey, "output", options.signature, &output_name,
                        &error)) {
    return Fail(kSignatureError, error);
  }

  std::vector<std::string> lines;
  if (!ReadLines(&lines)) return Fail(kIoError, "cannot read stdin");

  tensorflow::Tensor sentences(tensorflow::DT_STRING,
                               tensorflow::TensorShape({static_cast<int64_t>(lines.size())}));
  auto flat = sentences.flat<tensorflow::tstring>();
  for (size_t i = 0; i < lines.size(); ++i) flat(i) = std::move(lines[i]);

  std::vector<tensorflow::Tensor> outputs;
  status = bundle.session->Run({{input_name, sentences}}, {output_name}, {}, &outputs);
  if (!status.ok()) {
    return Fail(kRunError, "running signature '" + options.signature + "' failed: " + std::string(status.message()));
  }
  if (outputs.size() != 1 || outputs[0].dtype() != tensorflow::DT_STRING || outputs[0].dims() != 1 ||
      outputs[0].NumElements() != sentences.NumElements()) {
    return Fail(kRunError, "signature '" + options.signature + "' returned " +
                               (outputs.empty() ? std::string("nothing") : outputs[0].DebugString()) +
                               " for " + std::to_string(sentences.NumElements()) +
                               " sentences; expected a 1-D string tensor of the same length");
  }

  auto translations = outputs[0].flat<tensorflow::tstring>();
  std::string out;
  for (int64_t i = 0; i < translations.size(); ++i) {
    const tensorflow::tstring& t = translations(i);
    if (std::string(t.data(), t.size()).find('\n') != std::string::npos) {
      return Fail(kRunError, "translation " + std::to_string(i) +
                                 " contains a newline; it cannot be printed one per line");
    }
    out.append(t.data(), t.size());
    out.push_back('\n');
  }
  std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::cout.flush();
  if (!std::cout) return Fail(kIoError, "cannot write stdout");
  return kOk;
}
