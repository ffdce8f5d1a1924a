#pragma once
// Edits project.toml as text, the way a person would: the line holding the key is rewritten in place, its
// comment and every other line kept; a missing key is added at the end of its section, a missing section at
// the end of the file. The result is checked with the engine's project parser.
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"

namespace tsr::inspect {

enum class FieldKind { String, Int, Float, IntList, StringList, Bool };

// One setting of the project form.
struct ProjectField {
  std::string section;  // "train"
  std::string key;      // "lr"
  FieldKind kind = FieldKind::String;
  std::string help;
};

// The settings the form shows: the model family and the keys it declares (project/model_family.h), data,
// training and mesh.
std::vector<ProjectField> projectFields(std::string_view family);

// The value of section.key as written in the text (without its comment), or "" when absent; strings unquoted.
std::string fieldValue(const std::string& text, const std::string& section, const std::string& key);

// The TOML literal for what the user typed: quotes a string, checks a number; an error says what is wrong.
Result<std::string> tomlLiteral(FieldKind kind, const std::string& typed);

// Sets section.key to a TOML literal in the text: in place where the key is written, else as a new line at the
// end of the section (or, with `first`, right under its header: a [sharding] rule that must win over the
// rules already there).
std::string setFieldValue(const std::string& text, const std::string& section, const std::string& key,
                          const std::string& literal, bool first = false);

// Parses the text as the engine does; the error names the file and line.
Status validateProjectText(const std::string& text, const std::string& file, const std::string& dir);

// Where an error of the project parser points: "p/project.toml:5: unknown key 'stpes'" (or ":5:9:" with a
// column) gives {"p/project.toml", 5, 9}. Line 0 when the message names no line of a file.
struct TextLocation {
  std::string file;
  int line = 0;
  int column = 0;
};
TextLocation errorLocation(const std::string& message);

// The model file of a Python model project (`[model] python = "model.py"`), absolute; "" for any other project
// or one whose project.toml does not parse.
std::string modelSourceFile(const std::string& projectPath);

// The frames of a Python traceback quoted in an error (a model.py that failed to trace), innermost last, and the
// exception's own line ("ValueError: no weights today"). A SyntaxError's location is one frame.
struct TracebackFrame {
  std::string file;
  int line = 0;
  std::string function;  // "" for a SyntaxError's location
  std::string code;      // the source line Python quotes, trimmed
};
struct PythonTraceback {
  std::vector<TracebackFrame> frames;
  std::string exception;
};
PythonTraceback parseTraceback(const std::string& message);

}  // namespace tsr::inspect
