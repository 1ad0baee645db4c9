// Private to config: the closed sets' spellings and the Registry every option is declared through.
// Not for: the declarations themselves (options.cpp, infer_options.cpp).
#pragma once

#include "dptrain/config/options.h"
#include "dptrain/core/error.h"

#include <boost/program_options.hpp>

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dptrain {
namespace config {

namespace po = boost::program_options;

// In the order the error message lists them.
template <typename E>
struct Choice {
    const char* name;
    E value;
};
template <typename E>
using Choices = std::vector<Choice<E>>;

const Choices<ModelKind>& choices(ModelKind);
const Choices<Activation>& choices(Activation);
const Choices<Optimizer::Kind>& choices(Optimizer::Kind);
const Choices<IoMode>& choices(IoMode);
const Choices<AllreduceAlgo>& choices(AllreduceAlgo);
const Choices<Overlap>& choices(Overlap);
const Choices<DType>& choices(DType);
const Choices<OnNonfinite>& choices(OnNonfinite);
const Choices<MetricsFormat>& choices(MetricsFormat);
const Choices<ProgressMode>& choices(ProgressMode);
const Choices<GpuHealthMode>& choices(GpuHealthMode);
const Choices<DeviceKind>& choices(DeviceKind);
const Choices<Precision>& choices(Precision);
const Choices<AttentionKind>& choices(AttentionKind);
const Choices<Recompute>& choices(Recompute);
const Choices<GpuState>& choices(GpuState);

template <typename E>
const char* spelling(E v) {
    for (const Choice<E>& c : choices(E{}))
        if (c.value == v) return c.name;
    return "?";
}

// "--NAME 'TEXT' is unknown; use a, b or c" (`unknown` words the middle).
template <typename E>
E parse_choice(const char* option, const std::string& text, const char* unknown = "is unknown") {
    const Choices<E>& cs = choices(E{});
    std::string list;
    for (size_t i = 0; i < cs.size(); ++i) {
        if (cs[i].name == text) return cs[i].value;
        list += i == 0 ? "" : i + 1 == cs.size() ? " or " : ", ";
        list += cs[i].name;
    }
    throw UserError(strfmt("--%s '%s' %s; use %s", option, text.c_str(), unknown, list.c_str()));
}


unsigned long long parse_whole(const char* option, const std::string& text);

// Registers each option with Boost, keeping a printer (to_ini) and a choice's spellings.
template <class O>
struct Registry {
    po::options_description desc;
    std::vector<std::pair<std::string, std::function<std::string(const O&)>>> printers;
    std::map<std::string, std::string> values;  // a choice's spellings, space separated

    explicit Registry(const char* title) : desc(title, 100, 50) {}

    // A switch: `--name` alone means true; `--name false` and `name = false` in the INI work too.
    void flag(const char* name, bool O::*field, O& o, const char* help) {
        desc.add_options()(name, po::value<bool>(&(o.*field))->default_value(false)->implicit_value(true), help);
        printers.emplace_back(name, [field](const O& x) { return std::string(x.*field ? "true" : "false"); });
    }


    template <typename E>
    void choice(const char* name, E O::*field, O& o, E def, const char* help,
                const char* unknown = "is unknown") {
        O* target = &o;
        desc.add_options()(name,
                           po::value<std::string>()->default_value(spelling(def))->notifier(
                               [name, field, target, unknown](const std::string& v) {
                                   target->*field = parse_choice<E>(name, v, unknown);
                               }),
                           help);
        printers.emplace_back(name, [field](const O& x) { return std::string(spelling(x.*field)); });
        std::string& names = values[name];
        for (const Choice<E>& c : choices(E{})) names += (names.empty() ? "" : " ") + std::string(c.name);
    }

    // A whole number, or "auto" (stored as `automatic`, written back as "auto").
    void count_or_auto(const char* name, int O::*field, O& o, int def, int automatic, const char* help) {
        O* target = &o;
        desc.add_options()(name,
                           po::value<std::string>()->default_value(std::to_string(def))->notifier(
                               [name, field, target, automatic](const std::string& v) {
                                   if (v == "auto") {
                                       target->*field = automatic;
                                       return;
                                   }
                                   const bool digits = !v.empty() && v.size() <= 9 &&
                                                       v.find_first_not_of("0123456789") == std::string::npos;
                                   if (!digits)
                                       throw UserError(strfmt("--%s '%s' must be a positive whole number or auto", name,
                                                              v.c_str()));
                                   target->*field = std::stoi(v);
                               }),
                           help);
        printers.emplace_back(name, [field, automatic](const O& x) {
            return x.*field == automatic ? std::string("auto") : std::to_string(x.*field);
        });
    }

    template <typename T>
    void add(const char* name, T O::*field, O& o, T def, const char* help) {
        if constexpr (std::is_unsigned_v<T>) {
            // Boost reads "-1" into an unsigned type as its largest value, without a word.
            O* target = &o;
            desc.add_options()(name,
                               po::value<std::string>()->default_value(std::to_string(def))->notifier(
                                   [name, field, target](const std::string& v) {
                                       target->*field = static_cast<T>(parse_whole(name, v));
                                   }),
                               help);
        } else {
            desc.add_options()(name, po::value<T>(&(o.*field))->default_value(def), help);
        }
        printers.emplace_back(name, [field](const O& x) {
            std::ostringstream s;
            s.precision(10);
            s << x.*field;
            return s.str();
        });
    }
};


} // namespace config
} // namespace dptrain
