// The op table's attribute schema text (ops.def's attributes column: "dims: ints = [], keepdim:
// bool = false") read as items. Inference checks attributes against them (infer.cpp), and the
// typed attribute struct of each op is generated from them (ir/tools/gen_op_attrs.cpp): one
// reader of the text for both.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::schema {

struct Item {
  std::string_view name;
  std::vector<std::string_view> kinds;  // "int", "float", "none", ... as written
  std::string_view dflt;                // the default's text; empty where there is none
};

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The items of `text`, in order; an item that cannot be read sets `why` and ends the list.
inline std::vector<Item> parse(std::string_view text, std::string& why) {
  std::vector<Item> items;
  while (!trim(text).empty()) {
    size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      why = "has an item without a kind";
      return items;
    }
    Item it{trim(item.substr(0, colon)), {}, {}};
    std::string_view kinds = item.substr(colon + 1);
    if (size_t eq = kinds.find('='); eq != std::string_view::npos) {
      it.dflt = trim(kinds.substr(eq + 1));
      kinds = kinds.substr(0, eq);
    }
    for (std::string_view k = trim(kinds); !k.empty();) {
      size_t bar = k.find('|');
      it.kinds.push_back(trim(k.substr(0, bar)));
      k = bar == std::string_view::npos ? std::string_view{} : k.substr(bar + 1);
    }
    if (it.name.empty() || it.kinds.empty()) {
      why = "has an item without a name or kind";
      return items;
    }
    items.push_back(it);
  }
  return items;
}

}  // namespace kiln::ir::schema
