// Header lookup for HttpRequest; see http_message.h.
#include "server/http_message.h"

#include <strings.h>

namespace pagoda::server {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0)
      return value;
  }
  return {};
}

}  // namespace pagoda::server
