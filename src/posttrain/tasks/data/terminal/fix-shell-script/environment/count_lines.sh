#!/bin/bash
dir=$1
total=0
for f in $(find $dir -name *.txt | sort); do
  n=$(cat $f | wc -l)
  echo "$n ${f#$dir/}"
  total=$total+$n
done
echo "total $total"
