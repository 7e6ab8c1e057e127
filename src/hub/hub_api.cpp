// The Hub's file-list API and its errors; see hub_api.h. ModelScope's API answers the same
// questions in other words:
//   GET {endpoint}/api/v1/models/{org}/{name}/repo/files?Revision={rev}&Recursive=true
//       {"Code": 200, "Data": {"Files": [{"Path", "Type": "blob"|"tree", "Size", "Sha256"}]}}
//   GET {endpoint}/api/v1/models/{org}/{name}/repo?Revision={rev}&FilePath={path}
// It names no commit for the whole repo, so the snapshot of a ModelScope revision is named by
// a digest of its file list: the same files, the same snapshot.
#include "hub/hub_api.h"

#include <nettle/sha1.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace pagoda::hub {
namespace {

using nlohmann::json;

std::string hex(const uint8_t* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

json parse_json(const HttpResult& result, const std::string& url) {
  try {
    return json::parse(result.body);
  } catch (const json::exception& e) {
    fail("{}: the answer is not JSON ({}); is the endpoint a Hugging Face Hub?", url, e.what());
  }
}

std::string string_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

uint64_t size_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

RepoInfo fetch_huggingface(HttpClient& http, const HubSettings& s, const std::string& repo_id,
                           const std::string& revision) {
  const std::string url = fmt::format("{}/api/models/{}/revision/{}?blobs=true", s.endpoint,
                                      repo_id, url_escape(revision, false));
  const HttpResult result = http.get(url);
  if (result.error != TransportError::kNone || result.status != 200)
    fail_request(result, s, repo_id, "revision " + revision);
  const json j = parse_json(result, url);
  RepoInfo info{repo_id, revision, string_field(j, "sha"), false, {}};
  if (const auto gated = j.find("gated"); gated != j.end())
    info.gated = gated->is_string() || (gated->is_boolean() && gated->get<bool>());
  if (info.commit.empty()) fail("{}: the answer names no commit (\"sha\")", url);
  for (const json& sibling : j.value("siblings", json::array())) {
    RepoFile file;
    file.path = string_field(sibling, "rfilename");
    file.size = size_field(sibling, "size");
    file.git_sha1 = string_field(sibling, "blobId");
    if (const auto lfs = sibling.find("lfs"); lfs != sibling.end() && lfs->is_object()) {
      file.sha256 = string_field(*lfs, "sha256");
      file.size = size_field(*lfs, "size");
    }
    if (file.path.empty() || file.etag().empty())
      fail("{}: a file entry has no name or checksum (blobs=true unsupported?)", url);
    info.files.push_back(std::move(file));
  }
  return info;
}

RepoInfo fetch_modelscope(HttpClient& http, const HubSettings& s, const std::string& repo_id,
                          const std::string& revision) {
  const std::string url = fmt::format("{}/api/v1/models/{}/repo/files?Revision={}&Recursive=true",
                                      s.endpoint, repo_id, url_escape(revision, false));
  const HttpResult result = http.get(url);
  if (result.error != TransportError::kNone || result.status != 200)
    fail_request(result, s, repo_id, "revision " + revision);
  const json j = parse_json(result, url);
  if (j.value("Code", 200) != 200) {
    fail("{}: {} answered code {}: {}", repo_id, source_name(s), j.value("Code", 0),
         string_field(j, "Message"));
  }
  RepoInfo info{repo_id, revision, "", false, {}};
  const json files = j.contains("Data") ? j["Data"].value("Files", json::array()) : json::array();
  for (const json& entry : files) {
    if (string_field(entry, "Type") == "tree") continue;
    RepoFile file;
    file.path = string_field(entry, "Path");
    file.size = size_field(entry, "Size");
    file.sha256 = string_field(entry, "Sha256");
    if (file.path.empty() || file.sha256.empty())
      fail("{}: a file entry has no path or Sha256", url);
    info.files.push_back(std::move(file));
  }
  std::sort(info.files.begin(), info.files.end(),
            [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  sha1_ctx ctx;
  sha1_init(&ctx);
  for (const RepoFile& f : info.files) {
    const std::string line = f.path + '\0' + f.sha256 + '\n';
    sha1_update(&ctx, line.size(), reinterpret_cast<const uint8_t*>(line.data()));
  }
  uint8_t digest[SHA1_DIGEST_SIZE];
  sha1_digest(&ctx, SHA1_DIGEST_SIZE, digest);
  info.commit = hex(digest, SHA1_DIGEST_SIZE);
  return info;
}

}  // namespace

RepoInfo fetch_repo_info(HttpClient& http, const HubSettings& settings, const std::string& repo_id,
                         const std::string& revision) {
  return settings.source == HubSource::kModelScope
             ? fetch_modelscope(http, settings, repo_id, revision)
             : fetch_huggingface(http, settings, repo_id, revision);
}

std::string file_url(const HubSettings& s, const RepoInfo& info, const std::string& path) {
  if (s.source == HubSource::kModelScope) {
    // The snapshot id is ours: ModelScope is asked for the revision it was made from.
    return fmt::format("{}/api/v1/models/{}/repo?Revision={}&FilePath={}", s.endpoint, info.repo_id,
                       url_escape(info.revision, false), url_escape(path, false));
  }
  return fmt::format("{}/{}/resolve/{}/{}", s.endpoint, info.repo_id,
                     url_escape(info.commit, false), url_escape(path, true));
}

void fail_request(const HttpResult& result, const HubSettings& s, const std::string& repo_id,
                  const std::string& what) {
  const std::string& endpoint = s.endpoint;
  if (result.error == TransportError::kConnect) {
    throw HubUnreachable(fmt::format(
        "cannot reach {} to fetch {} ({}): check the network, set {} to a mirror, or set "
        "HF_HUB_OFFLINE=1 to use only models already in the cache",
        endpoint, repo_id, result.error_text,
        s.source == HubSource::kModelScope ? "MODELSCOPE_ENDPOINT" : "HF_ENDPOINT"));
  }
  if (result.error != TransportError::kNone) {
    fail("fetching {} of {} from {} failed: {}", what, repo_id, endpoint, result.error_text);
  }
  const std::string code = result.header("x-error-code");
  std::string message = result.header("x-error-message");
  const std::string token_hint =
      s.source == HubSource::kModelScope ? "MODELSCOPE_API_TOKEN" : "HF_TOKEN";
  if (code == "RevisionNotFound") {
    fail("{} not found in repository {} on {}", what, repo_id, endpoint);
  }
  if (code == "EntryNotFound") {
    fail("{} not found in repository {} on {}", what, repo_id, endpoint);
  }
  if (code == "GatedRepo" ||
      ((result.status == 401 || result.status == 403) && code != "RepositoryNotFound")) {
    if (s.token.empty()) {
      fail(
          "repository {} on {} is gated or private: downloading it needs an access token. Set "
          "{} to a token of an account that has accepted the model's terms on its page",
          repo_id, endpoint, token_hint);
    }
    fail(
        "repository {} on {} refused the token in {} (HTTP {}{}): request access on the "
        "model's page, or use a token of an account that has it",
        repo_id, endpoint, token_hint, result.status, message.empty() ? "" : ": " + message);
  }
  if (result.status == 404 || code == "RepositoryNotFound") {
    fail("repository {} not found on {}{}", repo_id, endpoint,
         s.token.empty() && result.status == 401
             ? " (if it is private, set " + token_hint + " to a token that may read it)"
             : "");
  }
  if (message.empty()) message = result.body.substr(0, 200);
  fail("fetching {} of {} from {} failed: HTTP {}{}", what, repo_id, endpoint, result.status,
       message.empty() ? "" : ": " + message);
}

}  // namespace pagoda::hub
