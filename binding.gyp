{
  "targets": [
    {
      "target_name": "safetensors_native",
      "sources": [
        "native/safetensors_native.c",
        "native/common.c",
        "native/huge.c",
        "native/bridge.c",
        "native/header_scan.c",
        "native/owned.c",
        "native/journal.c"
      ],
      "defines": [
        "NAPI_VERSION=8"
      ],
      "conditions": [
        [
          "OS!='win'",
          {
            "cflags!": [
              "-O3"
            ],
            "cflags": [
              "-O2",
              "-Wall",
              "-Wextra"
            ],
            "cflags_c": [
              "-std=gnu11"
            ],
            "xcode_settings": {
              "GCC_OPTIMIZATION_LEVEL": "2",
              "OTHER_CFLAGS": [
                "-Wall",
                "-Wextra",
                "-std=gnu11"
              ]
            }
          }
        ]
      ]
    },
    {
      "target_name": "safetensors_copy",
      "sources": [
        "native/copy.c",
        "native/copy_args.c",
        "native/direct_write.c",
        "native/gguf_q8.c",
        "native/merge_kernels.c",
        "native/merge_file.c",
        "native/map_guard.c"
      ],
      "defines": [
        "NAPI_VERSION=8"
      ],
      "conditions": [
        [
          "OS!='win'",
          {
            "cflags!": [
              "-O3"
            ],
            "cflags": [
              "-O2",
              "-Wall",
              "-Wextra",
              "-ffp-contract=off"
            ],
            "cflags_c": [
              "-std=gnu11"
            ],
            "xcode_settings": {
              "GCC_OPTIMIZATION_LEVEL": "2",
              "OTHER_CFLAGS": [
                "-Wall",
                "-Wextra",
                "-std=gnu11",
                "-ffp-contract=off"
              ]
            }
          }
        ]
      ]
    },
    {
      "target_name": "safetensors_v8",
      "sources": [
        "native/unaccounted.cc"
      ],
      "defines": [
        "NAPI_VERSION=8"
      ],
      "conditions": [
        [
          "OS!='win'",
          {
            "cflags!": [
              "-O3"
            ],
            "cflags": [
              "-O2",
              "-Wall",
              "-Wextra"
            ],
            "xcode_settings": {
              "GCC_OPTIMIZATION_LEVEL": "2",
              "OTHER_CFLAGS": [
                "-Wall",
                "-Wextra"
              ]
            }
          }
        ]
      ]
    }
  ]
}
