#!/usr/bin/perl

# Broken configurations: each is refused by -t with one "[emerg] ... in
# FILE:LINE" line (the line within the file), exit code 1 and never a
# panic: unterminated blocks and quotes, unbalanced braces, directives in
# the wrong place, huge, negative and overflowing numbers, sizes and times
# past nginx's limits, duplicate upstreams and zones, missing and looping
# includes, NUL and non-UTF-8 bytes, too long tokens and lines, deep
# nesting. Then, on a running instance, a HUP with a broken configuration
# keeps the old generation serving: same workers, requests answered.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/);
my $d = $t->testdir();

# name => [config text, the message expected (a regex)]. %%HTTP%% wraps the
# text in "events {} http { ... }" with a server.
my $long = 'x' x 5000;
my $names = join(' ', map { "n$_.example" } 1 .. 20000);
my @cases = (
	['unterminated block', "events {}\nhttp {\n server {\n  listen 127.0.0.1:1;\n",
		qr/unexpected end of file, expecting "}"/],
	['unbalanced braces', "events {}\nhttp {\n}\n}\n", qr/unexpected "}"/],
	['brace after words', "events {}\nhttp {\n a b }\n", qr/unexpected "}"/],
	['stray semicolon', "events {}\n;\n", qr/unexpected ";"/],
	['unterminated double quote', "events {}\nhttp {\n server_name \"abc;\n}\n",
		qr/unexpected end of file, expecting ";" or "}"/],
	['unterminated single quote', "events {}\nhttp {\n server_name 'abc;\n}\n",
		qr/unexpected end of file, expecting ";" or "}"/],
	['junk after quote', "events {}\nhttp {\n server_name \"a\"b;\n}\n",
		qr/unexpected "b"/],
	['wrong context', "events {}\nlisten 80;\n", qr/"listen" directive is not allowed here/],
	['proxy_pass in http', "events {}\nhttp {\n proxy_pass http://x;\n}\n",
		qr/"proxy_pass" directive is not allowed here/],
	['unknown directive', "events {}\nhttp {\n no_such_thing on;\n}\n",
		qr/unknown directive "no_such_thing"/],
	['missing arguments', "events {}\nhttp {\n keepalive_timeout;\n}\n",
		qr/invalid number of arguments in "keepalive_timeout" directive/],
	['huge number', "events {\n worker_connections 99999999999999999999999;\n}\n",
		qr/invalid number "99999999999999999999999"/],
	['negative number', "events {\n worker_connections -5;\n}\n", qr/invalid number "-5"/],
	['accept_balance not a flag', "events {\n accept_balance maybe;\n}\n",
		qr/invalid value "maybe" in "accept_balance" directive, it must be "on" or "off"/],
	['accept_balance twice', "events {\n accept_balance on;\n accept_balance off;\n}\n",
		qr/"accept_balance" directive is duplicate/],
	['too many workers', "worker_processes 100000;\nevents {}\n",
		qr/invalid value "100000" in "worker_processes" directive/],
	['huge port', "events {}\nhttp {\n server {\n  listen 127.0.0.1:99999;\n }\n}\n",
		qr/invalid port in "127.0.0.1:99999"/],
	['huge weight', "events {}\nhttp {\n upstream u {\n  server 127.0.0.1:1 weight=99999999999999;\n }\n}\n",
		qr/invalid parameter "weight=99999999999999"/],
	['negative max_fails', "events {}\nhttp {\n upstream u {\n  server 127.0.0.1:1 max_fails=-1;\n }\n}\n",
		qr/invalid parameter "max_fails=-1"/],
	['overflowing tries', "events {}\nhttp {\n proxy_next_upstream_tries 99999999999999999999999;\n}\n",
		qr/"proxy_next_upstream_tries" directive invalid number/],
	['size with g', "events {}\nhttp {\n large_client_header_buffers 4 99999g;\n}\n",
		qr/"large_client_header_buffers" directive invalid value/],
	['overflowing size', "events {}\nhttp {\n proxy_buffer_size 99999999999999999999k;\n}\n",
		qr/"proxy_buffer_size" directive invalid value/],
	['overflowing offset', "events {}\nhttp {\n client_max_body_size 8589934592g;\n}\n",
		qr/"client_max_body_size" directive invalid value/],
	['zero header buffer', "events {}\nhttp {\n client_header_buffer_size 0;\n}\n",
		qr/"client_header_buffer_size" directive invalid value/],
	['zero buffer', "events {}\nhttp {\n proxy_buffers 4 0;\n}\n",
		qr/"proxy_buffers" directive invalid value/],
	['time in years', "events {}\nhttp {\n keepalive_timeout 68y;\n}\n",
		qr/"keepalive_timeout" directive invalid value/],
	['time past 2^31 ms', "events {}\nhttp {\n proxy_read_timeout 25d;\n}\n",
		qr/"proxy_read_timeout" directive invalid value/],
	['bare time past 2^31 ms', "events {}\nhttp {\n send_timeout 99999999999;\n}\n",
		qr/"send_timeout" directive invalid value/],
	['overflowing time', "events {}\nhttp {\n client_header_timeout 99999999999999999999999s;\n}\n",
		qr/"client_header_timeout" directive invalid value/],
	['zone too big', "events {}\nhttp {\n upstream u {\n  zone z 1000g;\n  server 127.0.0.1:1;\n }\n}\n",
		qr/invalid zone size "1000g"/],
	['zone too small', "events {}\nhttp {\n upstream u {\n  zone z 4k;\n  server 127.0.0.1:1;\n }\n}\n",
		qr/zone "z" is too small/],
	['duplicate upstream', "events {}\nhttp {\n upstream a { server 127.0.0.1:1; }\n upstream a { server 127.0.0.1:2; }\n}\n",
		qr/duplicate upstream "a"/],
	['zone sizes conflict', "events {}\nhttp {\n upstream a { zone z 64k; server 127.0.0.1:1; }\n upstream b { zone z 128k; server 127.0.0.1:2; }\n}\n",
		qr/the size 131072 of shared memory zone "z" conflicts with already declared size 65536/],
	['zone in http and stream', "events {}\nhttp {\n upstream a { zone z 64k; server 127.0.0.1:1; }\n}\nstream {\n upstream b { zone z 64k; server 127.0.0.1:2; }\n}\n",
		qr/the shared memory zone "z" is already declared for a different use/],
	['missing include', "events {}\ninclude $d/no-such-file.conf;\n",
		qr/open\(\) "\Q$d\E\/no-such-file\.conf" failed \(2: No such file or directory\)/],
	['include loop', "events {}\ninclude $d/loop.conf;\n",
		qr/include nesting deeper than \d+/],
	['NUL byte', "events {}\nhttp {\n server_name a\0b;\n}\n", qr/unexpected NUL byte/],
	['not UTF-8', "events {}\nhttp {\n server_name a\xffb;\n}\n", qr/invalid UTF-8 byte/],
	['long token', "events {}\nhttp {\n server_name $long;\n}\n",
		qr/too long parameter "xxxxxxxxxx\.\.\." started/],
	['long quoted token', "events {}\nhttp {\n server_name \"$long;\n}\n",
		qr/too long parameter, probably missing terminating """ character/],
	['long line', "events {}\nhttp {\n server {\n  server_name $names\n}\n",
		qr/unexpected "}"/],
	['deep nesting', "events {}\nhttp {\n server {\n" . ("location / {\n" x 20000),
		qr/blocks nested deeper than \d+/],
);

$t->plan(scalar(@cases) * 3 + 9);

$t->write_file('loop.conf', "include $d/loop.conf;\n");

for my $c (@cases) {
	my ($name, $text, $re) = @$c;
	$t->write_file('c.conf', $text);
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'c.conf',
		'-e', 'c.log', '-t');
	is($rc, 1, "$name: -t fails");
	my @emerg = $err =~ /^sluice: \[emerg\] (.*)$/mg;
	my ($msg, $file, $line) = (($emerg[0] // '') =~ /^(.*) in \Q$d\E\/([\w.-]+):(\d+)$/);
	my $lines = () = $t->read_file($file // 'c.conf') =~ /\n/g;
	ok(@emerg == 1 && defined $msg && $msg =~ $re,
		"$name: [emerg] with the message and FILE:LINE") or diag($err);
	ok(defined $line && $line >= 1 && $line <= $lines + 1 && $err !~ /panicked|RUST_BACKTRACE/,
		"$name: line within the file, no panic") or diag($err);
}

# A running instance: a HUP with a broken configuration keeps the old
# generation serving.
my $good = <<'EOF';

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    upstream u {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%%;
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://u; }
    }
}

EOF
$t->write_file_expand('sluice.conf', $good);
$t->backend(port(8081));
$t->run();

my @w;
poll_until(sub { @w = $t->worker_pids(); @w == 2 }, 5);
is(scalar @w, 2, 'two workers');

my @bad = (
	['unterminated block', "    server {\n"],
	['NUL byte', "    server_name a\0b;\n"],
	['deep nesting', "    server {\n" . ("location / {\n" x 20000)],
	['unmappable zone', "    upstream v { zone big 8796093022207m; server 127.0.0.1:1; }\n"],
	['time past 2^31 ms', "    keepalive_timeout 25d;\n"],
);
my $emergs = 0;
for my $b (@bad) {
	my ($name, $insert) = @$b;
	my $conf = $good;
	$conf =~ s/(    access_log off;\n)/$1$insert/;
	$t->write_file_expand('sluice.conf', $conf);
	$t->signal('HUP');
	$emergs++;
	ok($t->waitforlog(sub { my $n = () = $_[0] =~ /\[emerg\]/g; $n >= $emergs }),
		"HUP $name: [emerg]");
}
like(http_get('/'), qr/^HTTP\/1\.1 200/, 'still serving after the bad reloads');
is(join(' ', $t->worker_pids()), join(' ', @w), 'the same workers');
is(() = $t->read_file('error.log') =~ /start worker processes/g, 1,
	'no new generation started');

# Every bad reload's [emerg] names the configuration file and a line.
$t->expect_errors(qr/\[emerg\] \d+#\d+: .* in \Q$d\E\/sluice\.conf:\d+$/);
