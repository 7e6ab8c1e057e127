// From a `--model` argument to a local path; see resolve_model.h.
#include "hub/resolve_model.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "hub/downloader.h"
#include "hub/http_client.h"
#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "hub/repo_reference.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

namespace fs = std::filesystem;

std::string cache_dir_of(const HubOptions& options, const HubSettings& settings) {
  return options.download_dir.empty() ? settings.cache_dir : options.download_dir;
}

SelectionRequest selection_request(const RepoReference& ref, const HubOptions& options) {
  SelectionRequest r;
  r.purpose = options.purpose;
  r.quant_tag = ref.quant_tag;
  r.gguf_file = options.gguf_file;
  r.include = options.include;
  return r;
}

Snapshot snapshot_of(const RepoReference& ref, const std::string& commit, const HubCache& cache,
                     const Selection& selection, std::vector<std::string> files) {
  Snapshot s;
  s.repo_id = ref.repo_id;
  s.commit = commit;
  s.dir = cache.snapshot_dir(commit).string();
  s.path = selection.gguf_file.empty() ? s.dir : (fs::path(s.dir) / selection.gguf_file).string();
  s.files = std::move(files);
  return s;
}

// The snapshot the cache holds for the revision, checked to have what the run needs; no
// network. `why` says why the cache is all there is, for the error.
Snapshot cached_snapshot(const RepoReference& ref, const HubOptions& options,
                         const HubSettings& settings, const std::string& why) {
  const std::string cache_dir = cache_dir_of(options, settings);
  const HubCache cache(cache_dir, ref.repo_id);
  const std::string revision =
      default_revision(options.revision, settings.source == HubSource::kModelScope);
  std::optional<std::string> commit =
      is_commit_hash(revision) ? std::optional<std::string>(revision) : cache.read_ref(revision);
  const std::vector<std::string> files =
      commit ? cache.snapshot_files(*commit) : std::vector<std::string>{};
  if (files.empty()) {
    fail(
        "{} and {} (revision {}) is not in the cache {}: run once with network access "
        "(`pagoda download {}`) to fetch it",
        why, ref.repo_id, revision, cache_dir, ref.repo_id);
  }
  Selection selection;
  try {
    selection = select_files(files, selection_request(ref, options), ref.repo_id);
  } catch (const Error& e) {
    fail("{}, and the cached snapshot {} will not do: {}", why,
         cache.snapshot_dir(*commit).string(), e.what());
  }
  std::vector<std::string> needed = selection.files;
  if (const std::string index = index_file(needed); !index.empty() && options.include.empty()) {
    const std::vector<std::string> shards =
        shards_of_index((cache.snapshot_dir(*commit) / index).string(), index);
    needed.insert(needed.end(), shards.begin(), shards.end());
  }
  std::vector<std::string> absent;
  for (const std::string& f : needed) {
    if (!std::binary_search(files.begin(), files.end(), f)) absent.push_back(f);
  }
  if (!absent.empty()) {
    fail(
        "{}, and the cached snapshot {} lacks {} (a download that did not finish?): run once "
        "with network access to complete it",
        why, cache.snapshot_dir(*commit).string(), fmt::join(absent, ", "));
  }
  return snapshot_of(ref, *commit, cache, selection, std::move(needed));
}

Snapshot fetch_snapshot(const RepoReference& ref, const HubOptions& options,
                        const HubSettings& settings) {
  const std::string revision =
      default_revision(options.revision, settings.source == HubSource::kModelScope);
  HttpClient http(settings.token);
  RepoInfo info;
  try {
    info = fetch_repo_info(http, settings, ref.repo_id, revision);
  } catch (const HubUnreachable& unreachable) {
    // As huggingface_hub does: a model fetched before still runs without the network.
    try {
      Snapshot cached = cached_snapshot(ref, options, settings, "the hub cannot be reached");
      spdlog::warn("{}; using the cached snapshot {}", unreachable.what(), cached.dir);
      return cached;
    } catch (const Error&) {
      throw unreachable;
    }
  }
  if (info.gated && settings.token.empty()) {
    const std::string why = fmt::format(
        "repository {} on {} is gated: downloading it needs an access token. Set HF_TOKEN to a "
        "token of an account that has accepted the model's terms on its page",
        ref.repo_id, settings.endpoint);
    try {
      Snapshot cached = cached_snapshot(ref, options, settings, why);  // fetched with a token
      spdlog::warn("{}; using the cached snapshot {}", why, cached.dir);
      return cached;
    } catch (const Error&) {
      throw Error(why);
    }
  }
  std::map<std::string, const RepoFile*> by_path;
  std::vector<std::string> names;
  for (const RepoFile& f : info.files) {
    by_path[f.path] = &f;
    names.push_back(f.path);
  }
  const auto files_named = [&](const std::vector<std::string>& paths) {
    std::vector<RepoFile> out;
    for (const std::string& p : paths) {
      const auto it = by_path.find(p);
      if (it == by_path.end()) {
        fail("{} of {} names {}, which the repository lacks", index_file(names), ref.repo_id, p);
      }
      out.push_back(*it->second);
    }
    return out;
  };

  const HubCache cache(cache_dir_of(options, settings), ref.repo_id);
  const Selection selection = select_files(names, selection_request(ref, options), ref.repo_id);
  std::vector<std::string> fetched = selection.files;
  // A sharded checkpoint in two steps: the index must be read to know the shards it names.
  download_files(settings, info, files_named(selection.files), cache);
  if (const std::string index = index_file(selection.files);
      !index.empty() && options.include.empty()) {
    const std::vector<std::string> shards =
        shards_of_index((cache.snapshot_dir(info.commit) / index).string(), index);
    download_files(settings, info, files_named(shards), cache);
    fetched.insert(fetched.end(), shards.begin(), shards.end());
  }
  // The ref last: a revision points at a snapshot only once the snapshot has what a run needs.
  if (revision != info.commit) cache.write_ref(revision, info.commit);
  return snapshot_of(ref, info.commit, cache, selection, std::move(fetched));
}

}  // namespace

Snapshot download_snapshot(const std::string& reference, const HubOptions& options,
                           const HubSettings& settings) {
  const std::optional<RepoReference> ref = parse_repo_reference(reference);
  if (!ref) {
    fail("'{}' is not a repository id: expected org/name, optionally with :QUANT (org/name:Q4_K_M)",
         reference);
  }
  if (!ref->quant_tag.empty() && !options.gguf_file.empty()) {
    fail("{}: give the GGUF file either as :{} or with --gguf-file, not both", reference,
         ref->quant_tag);
  }
  if (settings.offline) {
    return cached_snapshot(*ref, options, settings, "HF_HUB_OFFLINE is set");
  }
  return fetch_snapshot(*ref, options, settings);
}

std::string resolve_model(const std::string& reference, const HubOptions& options,
                          const HubSettings& settings) {
  std::error_code ec;
  if (reference.empty() || reference == "demo" || fs::exists(reference, ec)) return reference;
  if (!parse_repo_reference(reference)) return reference;  // a path; its opener reports it
  return download_snapshot(reference, options, settings).path;
}

std::string resolve_model(const std::string& reference, const HubOptions& options) {
  std::error_code ec;
  if (reference.empty() || reference == "demo" || fs::exists(reference, ec)) return reference;
  if (!parse_repo_reference(reference)) return reference;
  return resolve_model(reference, options, hub_settings_from_environment());
}

}  // namespace pagoda::hub
