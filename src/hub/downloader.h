// Fetches files of a repository into the cache: several at once, each resumed from its
// `.incomplete` part with a Range request (after a cut connection or in a later run), verified
// against the repository's checksum, and only then renamed into blobs/ and linked into the
// snapshot. Progress: a bar on a terminal, lines every few seconds otherwise.
#pragma once

#include <string>
#include <vector>

#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "hub/hub_settings.h"

namespace pagoda::hub {

// Makes every one of `files` present in cache.snapshot_dir(info.commit), fetching the blobs the
// cache lacks. Throws pagoda::Error (a failed request, a checksum mismatch, too little disk
// space, a write error); files already verified stay, so a rerun fetches only the rest.
void download_files(const HubSettings& settings, const RepoInfo& info,
                    const std::vector<RepoFile>& files, const HubCache& cache);

}  // namespace pagoda::hub
