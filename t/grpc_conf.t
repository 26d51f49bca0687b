#!/usr/bin/perl

# The grpc module's directives and the HTTP/2 upstream settings as -t
# checks them: errors name the directive as written (grpc_*, not the
# proxy_* one whose checks it shares) with file:line; grpc_ssl_* settings
# are a grpc_pass location's, not proxy_ssl_*'s.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(20);
my $d = $t->testdir();

# Runs -t with $loc in a location (line 4) and $ups in an upstream
# (line 7); (exit code, stderr).
sub check {
	my ($loc, $ups) = @_;
	$ups //= '';
	$t->write_file('t.conf', "events { }\nhttp {\nserver {\n"
		. "location / { $loc }\n}\n"
		. "upstream u {\n$ups server 127.0.0.1:1;\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	return ($rc, $err);
}

sub emerg {
	my ($loc, $ups, $re, $name) = @_;
	my ($rc, $err) = check($loc, $ups);
	like($err, qr/\[emerg\] \d+#0: $re in \Q$d\E\/t\.conf:\d+/, $name);
}

my ($rc, $err) = check("grpc_pass grpc://u; grpc_set_header X-A \$host; grpc_hide_header X-B;\n"
	. "grpc_pass_header Server; grpc_connect_timeout 1s; grpc_read_timeout 2s;\n"
	. "grpc_send_timeout 3s; grpc_next_upstream error timeout unavailable grpc_status=4,13 non_idempotent;\n"
	. "grpc_next_upstream_tries 2; grpc_next_upstream_timeout 5s; grpc_buffer_size 8k;\n"
	. "grpc_intercept_errors on; grpc_socket_keepalive on; grpc_ssl_server_name on;\n"
	. "grpc_ssl_name x; grpc_ssl_verify off; grpc_ssl_verify_depth 2; grpc_ssl_session_reuse off;\n"
	. "grpc_ssl_protocols TLSv1.3;",
	"keepalive_min 2; http2_ping_interval 10s timeout=500ms;");
is($rc, 0, 'every directive: test is successful') or diag($err);

($rc, $err) = check("proxy_pass http://u; proxy_http_version 2;");
is($rc, 0, 'proxy_http_version 2') or diag($err);

($rc, $err) = check("grpc_pass 127.0.0.1:5;");
is($rc, 0, 'grpc_pass without a scheme') or diag($err);

emerg('grpc_pass http://u;', '', 'invalid URL prefix in "http:\/\/u"', 'grpc_pass: not grpc://');
emerg('grpc_pass grpc://u/path;', '', 'invalid host in upstream "u\/path"',
	'grpc_pass: a URI part');
emerg('grpc_pass grpc://u; proxy_pass http://u;', '', '"proxy_pass" directive is duplicate',
	'grpc_pass and proxy_pass');
emerg('grpc_pass grpc://$host;', '', 'variables in "grpc_pass" are not supported', 'grpc_pass: variables');
emerg('grpc_pass grpc://u; grpc_read_timeout 1x;', '', '"grpc_read_timeout" directive invalid value',
	'grpc_read_timeout: the grpc_ name in the error');
emerg('grpc_pass grpc://u; grpc_connect_timeout 1s; grpc_connect_timeout 2s;', '',
	'"grpc_connect_timeout" directive is duplicate', 'grpc_connect_timeout twice');
emerg('grpc_pass grpc://u; grpc_next_upstream grpc_status=0;', '',
	'invalid value "grpc_status=0" in "grpc_next_upstream" directive', 'grpc_status=0 (OK is no failure)');
# nginx takes off among other values, and it means off.
($rc, $err) = check('grpc_pass grpc://u; grpc_next_upstream error off;');
is($rc, 0, 'off with others: taken, as nginx takes it') or diag($err);
emerg('grpc_pass grpc://u; grpc_set_header "bad name" 1;', '', 'invalid header name "bad name"',
	'grpc_set_header: bad name');
emerg('proxy_http_version 3;', '',
	'invalid value "3" in "proxy_http_version" directive, it must be "1.0", "1.1" or "2"', 'proxy_http_version 3');
emerg('grpc_pass grpcs://u; grpc_ssl_verify on;', '', 'no grpc_ssl_trusted_certificate for grpc_ssl_verify',
	'grpcs: grpc_ssl_verify without certificates');
emerg('grpc_pass grpcs://u; grpc_ssl_password_file /p;', '',
	'"grpc_ssl_password_file" is not supported: encrypted keys are not supported: .*',
	'grpc_ssl_password_file: refused with the reason');
emerg('grpc_pass grpcs://u; grpc_ssl_conf_command Options x;', '',
	'"grpc_ssl_conf_command" is not supported: OpenSSL configuration commands .*',
	'grpc_ssl_conf_command: refused with the reason');
emerg("grpc_pass grpcs://u; grpc_ssl_crl $d/none.pem;", '',
	'X509_LOOKUP_load_file\\("' . quotemeta("$d/none.pem") . '"\\) failed \\(.*\\)',
	'grpc_ssl_crl: read as proxy_ssl_crl (an unreadable file is an error naming it)');
emerg('grpc_pass grpc://u;', 'http2_ping_interval 0;', '"http2_ping_interval" directive invalid value',
	'http2_ping_interval 0');
emerg('grpc_pass grpc://u;', 'http2_ping_interval 1s wait=1s;', 'invalid parameter "wait=1s"',
	'http2_ping_interval: unknown parameter');

$t->write_file('s.conf', "events { }\nstream {\nupstream u { server 127.0.0.1:1; grpc_read_timeout 1s; }\n}\n");
($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 's.conf', '-e', 'stderr', '-t');
like($err, qr/"grpc_read_timeout" directive is not allowed here in \Q$d\E\/s\.conf:3/, 'grpc_* in stream: not here');
