// Docs sections generated from code (the pass tables of docs/CLI.md): a test compares the text
// between two marker lines with what the code says, and rewrites it with LOOM_UPDATE_DOCS=1.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "framework/file_util.h"

namespace loom::transpiler {

inline void CheckGeneratedSection(const std::string& path, const std::string& begin,
                                  const std::string& end, const std::string& want) {
  auto doc = ReadFile(path);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  size_t a = doc.value().find(begin), b = doc.value().find(end);
  ASSERT_TRUE(a != std::string::npos && b != std::string::npos && a < b)
      << path << " lacks the markers " << begin << " ... " << end;
  a += begin.size();
  const char* update = std::getenv("LOOM_UPDATE_DOCS");
  if (update != nullptr && std::string(update) == "1") {
    std::string text = doc.value();
    text.replace(a, b - a, want);
    ASSERT_TRUE(WriteFileAtomic(path, text).ok());
    return;
  }
  EXPECT_EQ(doc.value().substr(a, b - a), want)
      << path << "'s generated section is out of date: LOOM_UPDATE_DOCS=1 "
         "build/tests/transpiler/transpiler_test --gtest_filter='*DocsTable*' rewrites it";
}

}  // namespace loom::transpiler
